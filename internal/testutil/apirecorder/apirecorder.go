// Package apirecorder counts the requests a Kubernetes client sends, by verb and
// resource as RBAC names them (get, list, watch, create, update, patch, delete,
// deletecollection on group/resource/subresource), so a test can compare what a
// component actually does with the role it is granted, or count its API load.
//
// Wrap a rest.Config before building clients from it:
//
//	rec := apirecorder.New()
//	cfg.Wrap(rec.Wrap)
//	... run the component ...
//	rec.Counts() // {"list jobs.batch": 3, "patch guardedjobs.batch.guardedjob.dev/status": 7, ...}
package apirecorder

import (
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// Request is one API request in RBAC terms.
type Request struct {
	// Verb is the RBAC verb: get, list, watch, create, update, patch, delete,
	// deletecollection; for non-resource URLs the lower-case HTTP method.
	Verb string
	// Group is the API group ("" for the core group).
	Group string
	// Resource is the plural resource name, such as jobs; empty for a non-resource URL.
	Resource string
	// Subresource such as status or finalizers, if any.
	Subresource string
	// Namespace of a namespaced request, if any.
	Namespace string
	// Name of the object, if the request names one.
	Name string
	// Path is the URL path of a non-resource request (such as /version).
	Path string
}

// Key is how Counts names a request: "verb resource.group/subresource", the group
// left out for the core group ("get secrets", "patch guardedjobs.batch.guardedjob.dev/status"),
// or "verb /path" for a non-resource URL.
func (r Request) Key() string {
	if r.Resource == "" {
		return r.Verb + " " + r.Path
	}
	res := r.Resource
	if r.Group != "" {
		res += "." + r.Group
	}
	if r.Subresource != "" {
		res += "/" + r.Subresource
	}
	return r.Verb + " " + res
}

// Recorder records requests; safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	counts map[string]int
	seen   map[Request]int
}

// New returns an empty Recorder.
func New() *Recorder {
	return &Recorder{counts: map[string]int{}, seen: map[Request]int{}}
}

// Wrap returns a RoundTripper that records every request before passing it on; its
// signature fits rest.Config.Wrap.
func (r *Recorder) Wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripper{rec: r, next: next}
}

// Record adds one request, as Wrap does.
func (r *Recorder) Record(req *http.Request) {
	parsed := Parse(req)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[parsed.Key()]++
	r.seen[parsed]++
}

// Counts returns a copy of the counts by Key.
func (r *Recorder) Counts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.counts)
}

// Requests returns every distinct request seen (with namespace and name), sorted by Key.
func (r *Recorder) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Collect(maps.Keys(r.seen))
	slices.SortFunc(out, func(a, b Request) int {
		return strings.Compare(a.Key()+" "+a.Namespace+"/"+a.Name, b.Key()+" "+b.Namespace+"/"+b.Name)
	})
	return out
}

// Total is the number of requests recorded.
func (r *Recorder) Total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.counts {
		n += c
	}
	return n
}

// Reset forgets everything recorded so far.
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.counts)
	clear(r.seen)
}

type roundTripper struct {
	rec  *Recorder
	next http.RoundTripper
}

func (t roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	t.rec.Record(req)
	return t.next.RoundTrip(req)
}

// Parse reads an API request's verb and resource from its method, path and query,
// the way the API server's request-info resolver does for RBAC:
// /api/v1/namespaces/NS/RESOURCE/NAME/SUBRESOURCE and /apis/GROUP/VERSION/...
func Parse(req *http.Request) Request {
	path := req.URL.Path
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var rest []string
	var group string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		group, rest = parts[1], parts[3:]
	default:
		return Request{Verb: strings.ToLower(req.Method), Path: path}
	}
	if len(rest) == 0 {
		// Discovery of a group version.
		return Request{Verb: strings.ToLower(req.Method), Path: path}
	}
	out := Request{Group: group}
	// namespaces/NS/RESOURCE... is a namespaced request, except the namespace
	// object itself (namespaces/NS or namespaces/NS/status|finalize).
	if rest[0] == "namespaces" && len(rest) >= 3 {
		out.Namespace, rest = rest[1], rest[2:]
	}
	out.Resource = rest[0]
	if len(rest) >= 2 {
		out.Name = rest[1]
	}
	if len(rest) >= 3 {
		out.Subresource = rest[2]
	}
	if out.Resource == "namespaces" && out.Name != "" {
		out.Namespace = out.Name
	}
	out.Verb = verb(req, out.Name != "")
	return out
}

func verb(req *http.Request, named bool) string {
	switch req.Method {
	case http.MethodGet, http.MethodHead:
		switch {
		case req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1":
			return "watch"
		case named:
			return "get"
		default:
			return "list"
		}
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		if named {
			return "delete"
		}
		return "deletecollection"
	default:
		return strings.ToLower(req.Method)
	}
}
