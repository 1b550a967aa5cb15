package controllers

import (
	"errors"
	"testing"
	"time"

	"github.com/guardedjob/guardedjob/internal/schedule"
	"github.com/guardedjob/guardedjob/internal/specerror"
)

// at parses an RFC 3339 time; tests use it for readable instants.
func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("bad test time %q: %v", s, err)
	}
	return v
}

func mustSchedule(t *testing.T, spec, zone string) *schedule.Schedule {
	t.Helper()
	s, err := schedule.Parse(spec, zone)
	if err != nil {
		t.Fatalf("schedule.Parse(%q, %q): %v", spec, zone, err)
	}
	return s
}

func specError(err error) *specerror.Error {
	var se *specerror.Error
	if errors.As(err, &se) {
		return se
	}
	return nil
}
