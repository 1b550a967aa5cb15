package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/guardedjob/guardedjob/internal/leadership"
)

// inClusterNamespace is where a Pod finds its own namespace.
const inClusterNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// leaderLock makes the leader-election lease lock as controller-runtime would
// (a Lease named id in namespace, the manager's own namespace when empty, held
// under "<hostname>_<uuid>"), wrapped so that guard sees every renewal that
// succeeds: every side effect of the manager asks guard whether it still leads.
func leaderLock(cfg *restclient.Config, namespace, id string, renewDeadline time.Duration, guard *leadership.Guard) (resourcelock.Interface, error) {
	if namespace == "" {
		b, err := os.ReadFile(inClusterNamespace)
		if err != nil {
			return nil, errors.New("--leader-election-namespace is required outside a cluster")
		}
		namespace = strings.TrimSpace(string(b))
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("leader election identity: %w", err)
	}
	identity := host + "_" + string(uuid.NewUUID())
	c := restclient.AddUserAgent(restclient.CopyConfig(cfg), "leader-election")
	// A single slow request must not cost the leadership: bound each well
	// within the renew deadline (as controller-runtime does).
	c.Timeout = max(renewDeadline/2, time.Second)
	core, err := corev1client.NewForConfig(c)
	if err != nil {
		return nil, err
	}
	coordination, err := coordinationv1client.NewForConfig(c)
	if err != nil {
		return nil, err
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, namespace, id, core, coordination,
		resourcelock.ResourceLockConfig{Identity: identity})
	if err != nil {
		return nil, fmt.Errorf("leader election lock: %w", err)
	}
	return guard.Lock(lock), nil
}
