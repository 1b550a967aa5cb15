package main

import (
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// push copies the image index in source (a layout directory, or a tar of one) to
// reference, unchanged, so the registry serves it under the digest the build
// printed, and returns the pushed repository @ that digest.
func push(source, reference string) (string, error) {
	// Strict: the registry and the tag are written out, never Docker Hub's or
	// latest by default.
	ref, err := name.ParseReference(reference, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("%w: give REGISTRY/REPOSITORY:TAG, such as registry.example.com/team/guardedjob-manager:0.1.0", err)
	}
	st, err := os.Stat(source)
	if err != nil {
		return "", err
	}
	dir := source
	if !st.IsDir() {
		tmp, err := os.MkdirTemp("", "ociimage-")
		if err != nil {
			return "", err
		}
		defer func() { _ = os.RemoveAll(tmp) }()
		if err := readArchive(source, tmp); err != nil {
			return "", err
		}
		dir = tmp
	}
	idx, err := layoutIndex(dir)
	if err != nil {
		return "", fmt.Errorf("%s: %w", source, err)
	}
	if err := remote.WriteIndex(ref, idx, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	digest, err := idx.Digest()
	if err != nil {
		return "", err
	}
	return ref.Context().Digest(digest.String()).String(), nil
}

// layoutIndex returns the image index of a layout that holds exactly one, as
// build writes it.
func layoutIndex(dir string) (v1.ImageIndex, error) {
	l, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("not an OCI image layout: %w", err)
	}
	m, err := l.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 || !m.Manifests[0].MediaType.IsIndex() {
		return nil, fmt.Errorf("want one image index in index.json, got %d entries", len(m.Manifests))
	}
	return l.ImageIndex(m.Manifests[0].Digest)
}
