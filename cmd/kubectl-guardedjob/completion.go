package main

import (
	"slices"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// Shell completion is cobra's (`kubectl guardedjob completion bash`, or kubectl's
// own through a kubectl_complete-guardedjob script that runs `kubectl guardedjob
// __complete "$@"`); names come from the cluster, with the user's kubeconfig
// flags.

// completeNames completes a GuardedJob name in the namespace the flags name.
func (o *options) completeNames(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 || o.connect() != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	list := &batchv1alpha1.GuardedJobList{}
	if err := o.k8s.List(cmd.Context(), list, client.InNamespace(o.namespace)); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for _, gj := range list.Items {
		if strings.HasPrefix(gj.Name, toComplete) {
			names = append(names, gj.Name)
		}
	}
	slices.Sort(names)
	return names, cobra.ShellCompDirectiveNoFileComp
}

// registerConfigCompletions completes --namespace from the cluster and
// --context from the kubeconfig.
func registerConfigCompletions(root *cobra.Command, o *options) {
	_ = root.RegisterFlagCompletionFunc("namespace", func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if o.connect() != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		list := &corev1.NamespaceList{}
		if err := o.k8s.List(cmd.Context(), list); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		for _, ns := range list.Items {
			if strings.HasPrefix(ns.Name, toComplete) {
				names = append(names, ns.Name)
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	})
	_ = root.RegisterFlagCompletionFunc("context", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		raw, err := o.config.ToRawKubeConfigLoader().RawConfig()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		for name := range raw.Contexts {
			names = append(names, name)
		}
		slices.Sort(names)
		return names, cobra.ShellCompDirectiveNoFileComp
	})
}
