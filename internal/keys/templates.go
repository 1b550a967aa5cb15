package keys

import (
	"text/template"

	"github.com/guardedjob/guardedjob/internal/lockclient"
	"github.com/guardedjob/guardedjob/internal/specerror"
)

// The fields the key templates come from, as messages name them.
const (
	LockField       = "spec.lock.key"
	OccurrenceField = "spec.lock.occurrenceKey"
	FenceField      = "spec.fencing.key"
)

// Spec is what a GuardedJob's keys are made from: its lock, done-marker and fence
// key templates (defaults applied) and whether its runs take a fence.
type Spec struct {
	Lock, Occurrence, Fence string
	Fenced                  bool
}

// Templates are a GuardedJob's three key templates, parsed.
type Templates struct {
	lock, occurrence, fence *template.Template
	fenced                  bool
}

// ParseTemplates parses the templates of spec: the lock key, the done-marker key,
// then the fence key, which must be valid even when the runs take no fence.
// Errors are *specerror.Error{Reason: InvalidTemplate}.
func ParseTemplates(spec Spec) (*Templates, error) {
	t := &Templates{fenced: spec.Fenced}
	var err error
	if t.lock, err = ParseTemplate(LockField, spec.Lock); err != nil {
		return nil, err
	}
	if t.occurrence, err = ParseTemplate(OccurrenceField, spec.Occurrence); err != nil {
		return nil, err
	}
	if t.fence, err = ParseTemplate(FenceField, spec.Fence); err != nil {
		return nil, err
	}
	return t, nil
}

// LockKey renders the lock key of the occurrence data describes (data.Key is
// ignored). Errors are *specerror.Error, as Render's.
func (t *Templates) LockKey(data Data) (string, error) {
	data.Key = ""
	return Render(LockField, t.lock, data)
}

// Keys renders the keys of the occurrence data describes: the lock key, then the
// done-marker key and, for fenced runs, the fence key, both of which see the lock
// key as .Key (data.Key is ignored). The three must differ. Errors are
// *specerror.Error, as Render's, or InvalidKey when two keys are the same.
func (t *Templates) Keys(data Data) (lockclient.Keys, error) {
	var k lockclient.Keys
	var err error
	if k.Lock, err = t.LockKey(data); err != nil {
		return k, err
	}
	data.Key = k.Lock
	if k.Occurrence, err = Render(OccurrenceField, t.occurrence, data); err != nil {
		return k, err
	}
	if t.fenced {
		if k.Fence, err = Render(FenceField, t.fence, data); err != nil {
			return k, err
		}
	}
	if k.Lock == k.Occurrence || k.Lock == k.Fence || k.Occurrence == k.Fence {
		return k, specerror.Errorf(specerror.InvalidKeyReason,
			"%s, %s and %s must render to different keys, got %s, %s, %s", LockField, OccurrenceField, FenceField, k.Lock, k.Occurrence, k.Fence)
	}
	return k, nil
}
