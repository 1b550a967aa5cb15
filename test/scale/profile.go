package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
)

// profileBurst takes CPU profiles of the API server and, when it serves them,
// of the manager, over the burst that starts at due, into -profile-dir as
// <name>-apiserver.pprof and <name>-manager.pprof (go tool pprof -top reads
// them). It returns a wait for the profiles to be written.
func (b *bench) profileBurst(ctx context.Context, name string, due time.Time, withManager bool) func() {
	if b.profileDir == "" {
		return func() {}
	}
	secs := int(b.profileFor.Seconds())
	done := make(chan struct{}, 2)
	fetch := func(file string, get func(ctx context.Context) (io.ReadCloser, error)) {
		defer func() { done <- struct{}{} }()
		time.Sleep(time.Until(due))
		body, err := get(ctx)
		if err != nil {
			b.logf("WARNING: profile %s: %v", file, err)
			return
		}
		defer func() { _ = body.Close() }()
		f, err := os.Create(filepath.Join(b.profileDir, file))
		if err != nil {
			b.logf("WARNING: profile %s: %v", file, err)
			return
		}
		defer func() { _ = f.Close() }()
		if _, err := io.Copy(f, body); err != nil {
			b.logf("WARNING: profile %s: %v", file, err)
		}
	}
	n := 1
	go fetch(name+"-apiserver.pprof", func(ctx context.Context) (io.ReadCloser, error) {
		c, err := rest.UnversionedRESTClientFor(b.w.adminRaw())
		if err != nil {
			return nil, err
		}
		return c.Get().AbsPath("/debug/pprof/profile").Param("seconds", fmt.Sprint(secs)).Timeout(b.profileFor + time.Minute).Stream(ctx)
	})
	if withManager && b.w.pprof != "" {
		n++
		go fetch(name+"-manager.pprof", func(ctx context.Context) (io.ReadCloser, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", b.w.pprof, secs), nil)
			if err != nil {
				return nil, err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return nil, err
			}
			if resp.StatusCode != http.StatusOK {
				_ = resp.Body.Close()
				return nil, fmt.Errorf("manager pprof: %s", resp.Status)
			}
			return resp.Body, nil
		})
	}
	return func() {
		for range n {
			<-done
		}
	}
}
