package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"sort"
	"sync"
	"time"
)

// auditEvent is the part of an audit.k8s.io/v1 Event the benchmark reads.
type auditEvent struct {
	Verb string `json:"verb"`
	User struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	Received time.Time `json:"requestReceivedTimestamp"`
	Done     time.Time `json:"stageTimestamp"`
}

func (e *auditEvent) resource() string {
	if e.ObjectRef == nil {
		return ""
	}
	if e.ObjectRef.Subresource != "" {
		return e.ObjectRef.Resource + "/" + e.ObjectRef.Subresource
	}
	return e.ObjectRef.Resource
}

func (e *auditEvent) name() string {
	if e.ObjectRef == nil {
		return ""
	}
	return e.ObjectRef.Name
}

func (e *auditEvent) namespace() string {
	if e.ObjectRef == nil {
		return ""
	}
	return e.ObjectRef.Namespace
}

func (e *auditEvent) ok() bool {
	return e.ResponseStatus != nil && e.ResponseStatus.Code < 300
}

// isWrite says whether the request changes an object.
func (e *auditEvent) isWrite() bool {
	switch e.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// auditLog reads the API server's audit log as it grows.
type auditLog struct {
	path string

	mu     sync.Mutex
	offset int64
	rest   []byte
	events []auditEvent
}

func newAuditLog(path string) *auditLog { return &auditLog{path: path} }

// refresh reads what was appended since the last call.
func (a *auditLog) refresh() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	f, err := os.Open(a.path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	if _, err := f.Seek(a.offset, io.SeekStart); err != nil {
		return err
	}
	data, err := io.ReadAll(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return err
	}
	a.offset += int64(len(data))
	data = append(a.rest, data...)
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		var e auditEvent
		if err := json.Unmarshal(data[:i], &e); err == nil {
			a.events = append(a.events, e)
		}
		data = data[i+1:]
	}
	a.rest = append([]byte(nil), data...)
	return nil
}

// query returns the events (read so far) that match.
func (a *auditLog) query(match func(*auditEvent) bool) []auditEvent {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []auditEvent
	for i := range a.events {
		if match(&a.events[i]) {
			out = append(out, a.events[i])
		}
	}
	return out
}

// between matches requests of user received in [from, to).
func between(user string, from, to time.Time) func(*auditEvent) bool {
	return func(e *auditEvent) bool {
		return e.User.Username == user && !e.Received.Before(from) && e.Received.Before(to)
	}
}

// byVerb counts events by "verb resource".
func byVerb(events []auditEvent) map[string]int {
	out := map[string]int{}
	for i := range events {
		out[events[i].Verb+" "+events[i].resource()]++
	}
	return out
}

// percentile returns the p-th percentile (0..1) of ds by the nearest-rank method.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p*float64(len(s))+0.999999) - 1
	i = max(0, min(i, len(s)-1))
	return s[i]
}
