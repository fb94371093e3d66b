package main

import (
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// SPDXMediaType is the SBOM's media type, and the artifact type of the manifest that carries it.
const spdxMediaType = "application/spdx+json"

// The OCI empty descriptor's media type and content: an artifact's config when it has none.
const emptyMediaType = "application/vnd.oci.empty.v1+json"

var emptyJSON = []byte("{}")

// spdxDocument is the part of SPDX 2.3 this SBOM uses: the Go modules compiled into the
// binaries, from their build information, as ko's SBOM lists them.
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreation       `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreation struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string       `json:"name"`
	SPDXID           string       `json:"SPDXID"`
	VersionInfo      string       `json:"versionInfo,omitempty"`
	DownloadLocation string       `json:"downloadLocation"`
	FilesAnalyzed    bool         `json:"filesAnalyzed"`
	Checksums        []spdxSum    `json:"checksums,omitempty"`
	ExternalRefs     []spdxExtRef `json:"externalRefs,omitempty"`
	PrimaryPurpose   string       `json:"primaryPackagePurpose,omitempty"`
	Comment          string       `json:"comment,omitempty"`
}

type spdxSum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type spdxExtRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// spdxID makes an SPDX identifier of s: letters, digits, '.' and '-'.
func spdxID(s string) string {
	return "SPDXRef-" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '-'
	}, s)
}

// sbom returns the SPDX document of img's binaries as an OCI artifact whose subject is img.
func (o *buildOptions) sbom(img v1.Image, plat v1.Platform, infos []*buildinfo.BuildInfo) (v1.Image, error) {
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	doc := spdxDocument{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              fmt.Sprintf("%s %s (%s)", o.binaries[0], o.version, plat),
		DocumentNamespace: "https://spdx.org/spdxdocs/" + strings.ReplaceAll(digest.String(), ":", "-"),
		CreationInfo:      spdxCreation{Created: o.created.Format("2006-01-02T15:04:05Z"), Creators: []string{"Tool: oci build (go-containerregistry)"}},
	}
	imageID := spdxID("image-" + digest.Hex)
	doc.Packages = append(doc.Packages, spdxPackage{
		Name: o.binaries[0], SPDXID: imageID, VersionInfo: o.version, DownloadLocation: "NOASSERTION",
		Checksums:      []spdxSum{{Algorithm: "SHA256", Value: digest.Hex}},
		PrimaryPurpose: "CONTAINER",
	})
	doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", imageID})
	deps := map[string]*spdxPackage{}
	for i, info := range infos {
		binID := spdxID("binary-" + o.binaries[i])
		doc.Packages = append(doc.Packages, spdxPackage{
			Name: o.binaries[i], SPDXID: binID, VersionInfo: o.version, DownloadLocation: "NOASSERTION",
			PrimaryPurpose: "APPLICATION", Comment: "main package " + info.Path + ", built with " + info.GoVersion,
			ExternalRefs: []spdxExtRef{purl(info.Main.Path, o.version)},
		})
		doc.Relationships = append(doc.Relationships, spdxRelationship{imageID, "CONTAINS", binID})
		mods := append([]*debugModule{{Path: "stdlib", Version: info.GoVersion}}, modules(info)...)
		for _, m := range mods {
			id := spdxID("module-" + m.Path + "-" + m.Version)
			if deps[id] == nil {
				p := spdxPackage{Name: m.Path, SPDXID: id, VersionInfo: m.Version, DownloadLocation: "NOASSERTION",
					PrimaryPurpose: "LIBRARY", ExternalRefs: []spdxExtRef{purl(m.Path, m.Version)}}
				if m.Sum != "" {
					p.Comment = "go.sum " + m.Sum
				}
				deps[id] = &p
			}
			doc.Relationships = append(doc.Relationships, spdxRelationship{binID, "DEPENDS_ON", id})
		}
	}
	ids := make([]string, 0, len(deps))
	for id := range deps {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		doc.Packages = append(doc.Packages, *deps[id])
	}
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	size, err := img.Size()
	if err != nil {
		return nil, err
	}
	mt, err := img.MediaType()
	if err != nil {
		return nil, err
	}
	return newArtifact(spdxMediaType, data, v1.Descriptor{MediaType: mt, Size: size, Digest: digest, Platform: &plat},
		map[string]string{"org.opencontainers.image.created": o.created.Format("2006-01-02T15:04:05Z")})
}

type debugModule struct{ Path, Version, Sum string }

// modules lists the modules of a build, replacements resolved, the main module left out.
func modules(info *buildinfo.BuildInfo) []*debugModule {
	var out []*debugModule
	for _, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		out = append(out, &debugModule{Path: d.Path, Version: d.Version, Sum: d.Sum})
	}
	return out
}

func purl(path, version string) spdxExtRef {
	loc := "pkg:golang/" + path
	if path == "stdlib" {
		loc = "pkg:golang/stdlib"
		version = strings.TrimPrefix(version, "go")
	}
	if version != "" {
		loc += "@" + version
	}
	return spdxExtRef{Category: "PACKAGE-MANAGER", Type: "purl", Locator: loc}
}

// artifact is an OCI 1.1 artifact manifest: an empty config, one blob, a subject.
type artifact struct {
	manifest []byte
	blob     []byte
	blobDesc v1.Descriptor
}

func newArtifact(artifactType string, blob []byte, subject v1.Descriptor, annotations map[string]string) (v1.Image, error) {
	blobHash, blobSize, err := v1.SHA256(bytes.NewReader(blob))
	if err != nil {
		return nil, err
	}
	emptyHash, _, err := v1.SHA256(bytes.NewReader(emptyJSON))
	if err != nil {
		return nil, err
	}
	subject.Platform = nil
	a := &artifact{blob: blob, blobDesc: v1.Descriptor{MediaType: types.MediaType(artifactType), Size: blobSize, Digest: blobHash}}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  artifactType,
		Config:        v1.Descriptor{MediaType: emptyMediaType, Size: int64(len(emptyJSON)), Digest: emptyHash},
		Layers:        []v1.Descriptor{a.blobDesc},
		Subject:       &subject,
		Annotations:   annotations,
	}
	if a.manifest, err = json.Marshal(m); err != nil {
		return nil, err
	}
	return partial.CompressedToImage(a)
}

func (a *artifact) RawConfigFile() ([]byte, error)      { return emptyJSON, nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) RawManifest() ([]byte, error)        { return a.manifest, nil }

func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if h != a.blobDesc.Digest {
		return nil, fmt.Errorf("artifact has no blob %s", h)
	}
	return blobLayer{a}, nil
}

// blobLayer is the artifact's blob, uploaded as it is (not a tar, never decompressed).
type blobLayer struct{ a *artifact }

func (b blobLayer) Digest() (v1.Hash, error) { return b.a.blobDesc.Digest, nil }
func (b blobLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(b.a.blob)), nil
}
func (b blobLayer) Size() (int64, error)                { return b.a.blobDesc.Size, nil }
func (b blobLayer) MediaType() (types.MediaType, error) { return b.a.blobDesc.MediaType, nil }
