// Package clustername holds the default cluster name, the first part of every
// lease holder: one derived from the kube-system namespace UID, which differs
// per cluster and survives manager restarts. The manager uses it when
// --cluster-name is not set, and the kubectl plugin to recognise this cluster's
// holders.
package clustername

import "strings"

// Namespace is the namespace whose UID names the cluster.
const Namespace = "kube-system"

// FromNamespaceUID returns the cluster name derived from the UID of Namespace:
// "cluster-" and the UID's first group, such as cluster-5f3a9c0b.
func FromNamespaceUID(uid string) string {
	return "cluster-" + strings.SplitN(uid, "-", 2)[0]
}
