package controllers_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/guardedjob/guardedjob/internal/testutil/apirecorder"
)

// apiCalls records every request the managers of the story suite send to the
// API server, to compare with the generated ClusterRole.
var apiCalls = apirecorder.New()

// grantedElsewhere are rules of the manager's role that the stories cannot
// exercise, with the reason each is needed.
var grantedElsewhere = map[string]string{
	"get namespaces": "cmd/manager derives --cluster-name from the kube-system namespace UID",
	"create tokenreviews.authentication.k8s.io":          "the secure metrics endpoint authenticates scrapers (cmd/manager)",
	"create subjectaccessreviews.authorization.k8s.io":   "the secure metrics endpoint authorizes scrapers (cmd/manager)",
	"update guardedjobs.batch.guardedjob.dev/finalizers": "the API server requires it to set blockOwnerDeletion on a Job's owner reference (no request of its own)",
	"list jobs.batch":                               "the Job informer lists when the API server does not stream the initial state over a watch (this one does)",
	"list guardedjobruns.batch.guardedjob.dev":      "as for Jobs: the request informers list only when the API server does not stream",
	"list guardedjobbackfills.batch.guardedjob.dev": "as for Jobs: the request informers list only when the API server does not stream",
	"list guardedjobinspects.batch.guardedjob.dev":  "as for Jobs: the request informers list only when the API server does not stream",
	"list guardedjobunlocks.batch.guardedjob.dev":   "as for Jobs: the request informers list only when the API server does not stream",
	"patch events.events.k8s.io":                    "the event recorder patches an event that repeats into a series",
	"list nodes":                                    "cmd/manager reads the Pod ranges (Nodes' spec.podCIDRs) for --store-allow's cluster-ranges",
	"list servicecidrs.networking.k8s.io":           "cmd/manager reads the Service ranges for --store-allow's cluster-ranges",
}

// checkRole compares the recorded requests with config/rbac/role.yaml: every
// request must be granted, and every grant must be used by some request (or be
// listed in grantedElsewhere). It runs only after the whole suite.
func checkRole() error {
	if f := flag.Lookup("test.run"); f == nil || f.Value.String() != "" {
		return nil // a focused run does not exercise every call
	}
	data, err := os.ReadFile(filepath.Join("..", "config", "rbac", "role.yaml"))
	if err != nil {
		return err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, role); err != nil {
		return fmt.Errorf("parse role.yaml: %w", err)
	}
	used := map[string]bool{}
	var denied []string
	for _, req := range apiCalls.Requests() {
		if req.Resource == "" {
			continue // discovery and version: every authenticated user may
		}
		resource := req.Resource
		if req.Subresource != "" {
			resource += "/" + req.Subresource
		}
		granted := false
		for _, rule := range role.Rules {
			if slices.Contains(rule.APIGroups, req.Group) && slices.Contains(rule.Resources, resource) && slices.Contains(rule.Verbs, req.Verb) &&
				(len(rule.ResourceNames) == 0 || slices.Contains(rule.ResourceNames, req.Name)) {
				granted = true
				used[grantKey(req.Verb, resource, req.Group)] = true
			}
		}
		if !granted {
			denied = append(denied, fmt.Sprintf("%s %s/%s", req.Key(), req.Namespace, req.Name))
		}
	}
	var unused []string
	for _, rule := range role.Rules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					k := grantKey(v, res, g)
					if !used[k] && grantedElsewhere[k] == "" {
						unused = append(unused, k)
					}
				}
			}
		}
	}
	if len(denied)+len(unused) == 0 {
		return nil
	}
	return fmt.Errorf("config/rbac/role.yaml does not match the calls the manager makes:\n  not granted: %s\n  granted but never used: %s",
		strings.Join(denied, ", "), strings.Join(unused, ", "))
}

func grantKey(verb, resource, group string) string {
	if group == "" {
		return verb + " " + resource
	}
	name, sub, _ := strings.Cut(resource, "/")
	if sub != "" {
		return verb + " " + name + "." + group + "/" + sub
	}
	return verb + " " + name + "." + group
}
