package main

import (
	"debug/buildinfo"
	"os"
	"slices"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	purl "github.com/package-url/packageurl-go"
)

// writeSBOM writes a CycloneDX (1.6, JSON) SBOM of the image index: the image,
// its two binaries with the Go modules and the Go standard library each was
// linked from (as the binaries record them, go version -m), and the module the
// root certificates come from. Nothing else is in the image.
func writeSBOM(o options, digest v1.Hash, bins []builtBinary) error {
	image := purl.NewPackageURL(purl.TypeOCI, "", imageTitle, digest.String(),
		purl.QualifiersFromMap(map[string]string{"tag": o.tag}), "").ToString()
	ca := goPURL(caModule, caVersion(), "")

	components := map[string]cdx.Component{
		ca: {BOMRef: ca, Type: cdx.ComponentTypeLibrary, Name: caModule, Version: caVersion(), PackageURL: ca,
			Description: "Mozilla's root certificates, as " + caFile},
	}
	linked := map[string][]string{} // binary's bom-ref -> modules' bom-refs
	var binRefs []string
	for _, b := range bins {
		ref := binaryPURL(b.info, o.version)
		if _, ok := components[ref]; !ok {
			binRefs = append(binRefs, ref)
			components[ref] = cdx.Component{BOMRef: ref, Type: cdx.ComponentTypeApplication, Name: b.name, Version: o.version,
				PackageURL: ref, Description: "/" + b.name + ", built from " + b.info.Path}
		}
		// The standard library is a component too: its vulnerabilities are the binary's.
		std := goPURL("stdlib", b.info.GoVersion, "")
		components[std] = cdx.Component{BOMRef: std, Type: cdx.ComponentTypeLibrary, Name: "stdlib", Version: b.info.GoVersion, PackageURL: std}
		linked[ref] = appendUnique(linked[ref], std)
		for _, m := range b.info.Deps {
			path, version := m.Path, m.Version
			if m.Replace != nil && m.Replace.Version != "" {
				path, version = m.Replace.Path, m.Replace.Version
			}
			p := goPURL(path, version, "")
			components[p] = cdx.Component{BOMRef: p, Type: cdx.ComponentTypeLibrary, Name: path, Version: version, PackageURL: p}
			linked[ref] = appendUnique(linked[ref], p)
		}
	}

	bom := cdx.NewBOM()
	bom.Metadata = &cdx.Metadata{
		Timestamp: o.created.Format(time.RFC3339),
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{{Type: cdx.ComponentTypeApplication, Name: "ociimage",
			Description: "hack/ociimage of " + o.source}}},
		Component: &cdx.Component{BOMRef: image, Type: cdx.ComponentTypeContainer, Name: imageTitle, Version: o.version, PackageURL: image,
			Licenses:           &cdx.Licenses{{License: &cdx.License{ID: license}}},
			ExternalReferences: &[]cdx.ExternalReference{{Type: cdx.ERTypeVCS, URL: o.source}}},
	}
	var list []cdx.Component
	for _, c := range components {
		list = append(list, c)
	}
	slices.SortFunc(list, func(a, b cdx.Component) int { return strings.Compare(a.BOMRef, b.BOMRef) })
	bom.Components = &list
	deps := []cdx.Dependency{{Ref: image, Dependencies: ptr(append(slices.Sorted(slices.Values(binRefs)), ca))}}
	for _, ref := range slices.Sorted(slices.Values(binRefs)) {
		deps = append(deps, cdx.Dependency{Ref: ref, Dependencies: ptr(slices.Sorted(slices.Values(linked[ref])))})
	}
	bom.Dependencies = &deps

	f, err := os.Create(o.sbom)
	if err != nil {
		return err
	}
	enc := cdx.NewBOMEncoder(f, cdx.BOMFileFormatJSON).SetPretty(true)
	if err := enc.EncodeVersion(bom, cdx.SpecVersion1_6); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// binaryPURL is the package URL of a binary's main package at the release's tag
// (vX.Y.Z; a version such as dev stays as it is).
func binaryPURL(info *buildinfo.BuildInfo, version string) string {
	if version != "" && version[0] >= '0' && version[0] <= '9' {
		version = "v" + version
	}
	return goPURL(info.Main.Path, version, strings.TrimPrefix(info.Path, info.Main.Path+"/"))
}

// goPURL is the package URL of a Go module (or, with subpath, of a package in it).
func goPURL(module, version, subpath string) string {
	namespace, name := "", module
	if i := strings.LastIndex(module, "/"); i >= 0 {
		namespace, name = module[:i], module[i+1:]
	}
	return purl.NewPackageURL(purl.TypeGolang, namespace, name, version, nil, subpath).ToString()
}

func appendUnique(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

func ptr[T any](v T) *T { return &v }
