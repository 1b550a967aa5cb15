package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// crdVariant is one CRD the floorcrd phase installs, and its rounds.
type crdVariant struct {
	name    string
	crd     *apiextensionsv1.CustomResourceDefinition
	size    int             // bytes as JSON
	docs    map[string]bool // its descriptions, to see which one the API server publishes
	results []floorResult
}

// floorCRDs runs the floor's writes under two GuardedJob CRDs in turn on one API
// server: the checkout's and the one -floor-crd names (an older one, say). Rounds
// go A B B A A B ..., so a machine that gets busier or quieter over the run weighs
// on both alike. It reports what a status update costs under each: its latency and
// kube-apiserver's CPU time per run's writes.
func (b *bench) floorCRDs(ctx context.Context) error {
	if b.floorCRD == "" {
		return fmt.Errorf("the floorcrd phase needs -floor-crd FILE")
	}
	a, err := readCRDVariant(filepath.Join(b.w.root, "config", "crd", "bases", "batch.guardedjob.dev_guardedjobs.yaml"), "checkout")
	if err != nil {
		return err
	}
	other, err := readCRDVariant(b.floorCRD, filepath.Base(b.floorCRD))
	if err != nil {
		return err
	}
	variants := []*crdVariant{a, other}
	for round := range 2 * b.floorRounds {
		v := variants[(round+round/2)%2] // A B B A A B B A ...
		if err := b.installCRD(ctx, v, variants); err != nil {
			return err
		}
		b.logf("floorcrd round %d: %s", round+1, v.name)
		r, err := b.floorRound(ctx, max(1, b.floorStatusWrites))
		if err != nil {
			return err
		}
		v.results = append(v.results, r)
	}

	b.printf("\n### Status update cost by CRD (N=%d per round, %d writers, %d rounds each, alternating)\n\n", b.n, b.writers, b.floorRounds)
	b.printf("| CRD | size as JSON | round total, median | status update p50 / p99 | kube-apiserver CPU per run (%d status updates + 1 Job create), median |\n|---|---|---|---|---|\n", max(1, b.floorStatusWrites))
	type summary struct{ total, p50, p99, cpu time.Duration }
	sums := make([]summary, len(variants))
	for i, v := range variants {
		var totals, cpus, status []time.Duration
		for _, r := range v.results {
			totals = append(totals, r.total)
			cpus = append(cpus, r.apiCPU/time.Duration(b.n))
			status = append(status, r.status...)
		}
		sums[i] = summary{percentile(totals, 0.5), percentile(status, 0.5), percentile(status, 0.99), percentile(cpus, 0.5)}
		b.printf("| %s | %d KiB | %s | %s / %s | %.2f ms |\n", v.name, v.size/1024, secs(sums[i].total),
			ms(sums[i].p50), ms(sums[i].p99), float64(sums[i].cpu)/float64(time.Millisecond))
	}
	ratio := func(x, y time.Duration) string {
		if y == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", float64(x)/float64(y))
	}
	b.printf("| %s / %s | | %s | %s / %s | %s |\n", variants[0].name, variants[1].name, ratio(sums[0].total, sums[1].total),
		ratio(sums[0].p50, sums[1].p50), ratio(sums[0].p99, sums[1].p99), ratio(sums[0].cpu, sums[1].cpu))
	return nil
}

func readCRDVariant(path, name string) (*crdVariant, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	raw, err := json.Marshal(crd)
	if err != nil {
		return nil, err
	}
	docs := map[string]bool{}
	collectDescriptions(crd.Spec.Versions[0].Schema.OpenAPIV3Schema, docs)
	return &crdVariant{name: name, crd: crd, size: len(raw), docs: docs}, nil
}

func collectDescriptions(s *apiextensionsv1.JSONSchemaProps, into map[string]bool) {
	if s == nil {
		return
	}
	if s.Description != "" {
		into[s.Description] = true
	}
	for _, p := range s.Properties {
		collectDescriptions(&p, into)
	}
	if s.Items != nil {
		collectDescriptions(s.Items.Schema, into)
	}
}

// installCRD puts v's spec into the GuardedJob CRD and waits until the API server
// publishes it (a description only v has is in its OpenAPI document, one only the
// others have is not): by then it has built its handlers and models for v, and
// that work does not fall into the next round.
func (b *bench) installCRD(ctx context.Context, v *crdVariant, all []*crdVariant) error {
	current := &apiextensionsv1.CustomResourceDefinition{}
	if err := b.w.client.Get(ctx, client.ObjectKey{Name: v.crd.Name}, current); err != nil {
		return err
	}
	current.Spec = v.crd.Spec
	if err := b.w.client.Update(ctx, current); err != nil {
		return fmt.Errorf("install the %s CRD: %w", v.name, err)
	}
	var only, notOnly string
	for _, o := range all {
		if o == v {
			continue
		}
		for d := range v.docs {
			if !o.docs[d] && only == "" {
				only = d
			}
		}
		for d := range o.docs {
			if !v.docs[d] && notOnly == "" {
				notOnly = d
			}
		}
	}
	cs, err := kubernetes.NewForConfig(b.w.admin)
	if err != nil {
		return err
	}
	path := "/openapi/v3/apis/" + v.crd.Spec.Group + "/" + v.crd.Spec.Versions[0].Name
	return poll(ctx, 2*time.Minute, 250*time.Millisecond, "the "+v.name+" CRD to be published", func() (bool, error) {
		raw, err := cs.Discovery().RESTClient().Get().AbsPath(path).DoRaw(ctx)
		if err != nil {
			return false, nil // not published yet
		}
		var doc any
		if err := json.Unmarshal(raw, &doc); err != nil {
			return false, err
		}
		published := map[string]bool{}
		walkDescriptions(doc, published)
		return (only == "" || published[only]) && (notOnly == "" || !published[notOnly]), nil
	})
}

// walkDescriptions collects every "description" string of a decoded JSON document.
func walkDescriptions(v any, into map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		if d, ok := x["description"].(string); ok {
			into[d] = true
		}
		for _, e := range x {
			walkDescriptions(e, into)
		}
	case []any:
		for _, e := range x {
			walkDescriptions(e, into)
		}
	}
}
