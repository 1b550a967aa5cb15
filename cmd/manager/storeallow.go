package main

// The cluster's own address ranges, for the cluster-ranges item of --store-allow:
// the Service ranges (ServiceCIDR objects) and the Pod ranges (the Nodes'
// spec.podCIDRs). A tenant's Redis inside the cluster is reached at those: by its
// Service's ClusterIP, or, for the masters a Sentinel announces and the nodes of a
// Cluster, by Pod IP. Node addresses (hostNetwork Pods, the kubelets, anything else
// on the node network) are in neither.

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go4.org/netipx"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	networkingv1client "k8s.io/client-go/kubernetes/typed/networking/v1"
	restclient "k8s.io/client-go/rest"

	"github.com/guardedjob/guardedjob/internal/lockclient"
)

// +kubebuilder:rbac:groups="",resources=nodes,verbs=list
// +kubebuilder:rbac:groups=networking.k8s.io,resources=servicecidrs,verbs=list

const (
	// clusterRangesRefresh is how often the ranges are read again: a Node the
	// cluster autoscaler adds brings a Pod range of its own.
	clusterRangesRefresh = 5 * time.Minute
	// clusterRangesRetry is how soon a failed read is tried again.
	clusterRangesRetry = 30 * time.Second
	// clusterRangesTimeout bounds one read.
	clusterRangesTimeout = 30 * time.Second
)

// clusterRanges is what one read found.
type clusterRanges struct {
	service, pod []netip.Prefix
	// serviceCIDRsServed is false where the API server serves no
	// networking.k8s.io/v1 ServiceCIDR (before Kubernetes 1.33, or with the
	// MultiCIDRServiceAllocator feature off): the Service range is then unknown.
	serviceCIDRsServed bool
	// nodes counts the Nodes, withoutPodCIDRs those without spec.podCIDRs (their
	// network plugin assigns Pod addresses itself).
	nodes, withoutPodCIDRs int
}

// all returns every range, merged into the fewest prefixes that cover them.
func (r clusterRanges) all() []netip.Prefix { return merge(slices.Concat(r.service, r.pod)) }

// merge returns the fewest prefixes covering ps, sorted: the /24s of a few
// thousand Nodes become the few blocks they fill of the cluster's Pod CIDR.
func merge(ps []netip.Prefix) []netip.Prefix {
	var b netipx.IPSetBuilder
	for _, p := range ps {
		b.AddPrefix(p)
	}
	set, err := b.IPSet()
	if err != nil {
		return nil
	}
	return set.Prefixes()
}

// clusterRangeClients reads ServiceCIDRs and Nodes, in protobuf: a list of every
// Node of a large cluster is several megabytes as JSON.
type clusterRangeClients struct {
	core       corev1client.CoreV1Interface
	networking networkingv1client.NetworkingV1Interface
}

func newClusterRangeClients(cfg *restclient.Config) (*clusterRangeClients, error) {
	c := restclient.CopyConfig(cfg)
	c.ContentType = "application/vnd.kubernetes.protobuf"
	c.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	core, err := corev1client.NewForConfig(c)
	if err != nil {
		return nil, err
	}
	networking, err := networkingv1client.NewForConfig(c)
	if err != nil {
		return nil, err
	}
	return &clusterRangeClients{core: core, networking: networking}, nil
}

// read lists the ServiceCIDR objects and the Nodes.
func (c *clusterRangeClients) read(ctx context.Context) (clusterRanges, error) {
	ctx, cancel := context.WithTimeout(ctx, clusterRangesTimeout)
	defer cancel()
	var r clusterRanges
	// From the API server's watch cache (resourceVersion 0): a few seconds stale at
	// worst, and no read from etcd.
	cidrs, err := c.networking.ServiceCIDRs().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return r, fmt.Errorf("list ServiceCIDRs: %w", err)
	default:
		r.serviceCIDRsServed = true
		for _, sc := range cidrs.Items {
			for _, s := range sc.Spec.CIDRs {
				if p, err := netip.ParsePrefix(s); err == nil {
					r.service = append(r.service, p.Masked())
				}
			}
		}
	}
	nodes, err := c.core.Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return r, fmt.Errorf("list Nodes: %w", err)
	}
	r.nodes = len(nodes.Items)
	for _, n := range nodes.Items {
		podCIDRs := n.Spec.PodCIDRs
		if len(podCIDRs) == 0 && n.Spec.PodCIDR != "" {
			podCIDRs = []string{n.Spec.PodCIDR}
		}
		if len(podCIDRs) == 0 {
			r.withoutPodCIDRs++
		}
		for _, s := range podCIDRs {
			if p, err := netip.ParsePrefix(s); err == nil {
				r.pod = append(r.pod, p.Masked())
			}
		}
	}
	return r, nil
}

// startClusterRanges gives allow the cluster's ranges when it has the
// cluster-ranges item (and does nothing otherwise): it reads them now, before any
// GuardedJob is reconciled, and then every clusterRangesRefresh until ctx ends.
// A failed read is logged and retried; until one succeeds the item admits no
// address, and after one the ranges last read stay.
func startClusterRanges(ctx context.Context, cfg *restclient.Config, allow *lockclient.AllowList, log logr.Logger) {
	if !allow.WantsClusterRanges() {
		return
	}
	log = log.WithValues("storeAllow", lockclient.ClusterRanges)
	c, err := newClusterRangeClients(cfg)
	if err != nil {
		log.Error(err, "Cannot read the cluster's address ranges; tenant stores get no connection")
		return
	}
	var last []netip.Prefix
	found := false
	read := func() bool {
		r, err := c.read(ctx)
		if err != nil {
			log.Error(err, "Could not read the cluster's address ranges; keeping the ranges read before", "ranges", prefixes(last))
			return false
		}
		ranges := r.all()
		if found && slices.Equal(ranges, last) {
			return true
		}
		allow.SetClusterRanges(ranges)
		log.Info("The cluster's address ranges for tenant stores", "serviceRanges", prefixes(merge(r.service)), "podRanges", prefixes(merge(r.pod)))
		if !found {
			warnMissingRanges(r, log)
		}
		last, found = ranges, true
		return true
	}
	ok := read()
	go func() {
		for {
			wait := clusterRangesRefresh
			if !ok {
				wait = clusterRangesRetry
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			ok = read()
		}
	}()
}

// warnMissingRanges says which of the cluster's ranges the manager could not find,
// and what to add to --store-allow instead.
func warnMissingRanges(r clusterRanges, log logr.Logger) {
	if !r.serviceCIDRsServed {
		log.Info("WARNING: the API server serves no ServiceCIDR objects (networking.k8s.io/v1, Kubernetes 1.33 or later), so the Service range is unknown and no ClusterIP is admitted; add the cluster's Service CIDR to --store-allow, e.g. cluster-ranges,10.96.0.0/12")
	}
	if r.withoutPodCIDRs > 0 {
		log.Info("WARNING: Nodes without spec.podCIDRs (their network plugin assigns Pod addresses itself): their Pods' addresses are not admitted; add the cluster's Pod CIDR to --store-allow",
			"nodes", r.nodes, "withoutPodCIDRs", r.withoutPodCIDRs)
	}
}

func prefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
