package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// parseParams reads run --param NAME=VALUE flags.
func parseParams(flags []string) (map[string]string, error) {
	if len(flags) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(flags))
	for _, f := range flags {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" {
			return nil, usageError{msg: fmt.Sprintf("--param %q: want NAME=VALUE", f)}
		}
		if _, dup := out[k]; dup {
			return nil, usageError{msg: fmt.Sprintf("--param %s is given twice", k)}
		}
		out[k] = v
	}
	return out, nil
}

// setAnnotations sets (a value) or removes (nil) annotations of a GuardedJob
// with one merge patch of its metadata only.
func (o *options) setAnnotations(ctx context.Context, gj *batchv1alpha1.GuardedJob, kv map[string]*string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": kv}})
	if err != nil {
		return err
	}
	return o.k8s.Patch(ctx, gj, client.RawPatch(types.MergePatchType, patch))
}
