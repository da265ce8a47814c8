package main

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The parts of SPDX 2.3's JSON form the SBOM uses.
type spdxDoc struct {
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
	Name                  string         `json:"name"`
	SPDXID                string         `json:"SPDXID"`
	VersionInfo           string         `json:"versionInfo,omitempty"`
	Supplier              string         `json:"supplier,omitempty"`
	DownloadLocation      string         `json:"downloadLocation"`
	FilesAnalyzed         bool           `json:"filesAnalyzed"`
	LicenseDeclared       string         `json:"licenseDeclared,omitempty"`
	PrimaryPackagePurpose string         `json:"primaryPackagePurpose,omitempty"`
	Checksums             []spdxChecksum `json:"checksums,omitempty"`
	ExternalRefs          []spdxRef      `json:"externalRefs,omitempty"`
}

type spdxChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// sbom describes the image: the Debian package of its base, the binary, and
// every Go module compiled into the binary (as Go recorded them in it, with
// the Go standard library as "stdlib").
func sbom(bin binary, d deb, version string, digest v1.Hash, epoch time.Time) spdxDoc {
	purl := func(typ, name, ver string) []spdxRef {
		return []spdxRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl",
			ReferenceLocator: "pkg:" + typ + "/" + name + "@" + url.PathEscape(ver)}}
	}
	doc := spdxDoc{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              fmt.Sprintf("%s %s image", imageName, version),
		DocumentNamespace: fmt.Sprintf("%s/sbom/%s/%s", source, version, digest.Hex),
		CreationInfo:      spdxCreation{Created: epoch.Format(time.RFC3339), Creators: []string{"Tool: haproxy-k8s-sync hack/image"}},
	}
	image := spdxPackage{Name: imageName, SPDXID: "SPDXRef-Image", VersionInfo: version, DownloadLocation: "NOASSERTION",
		LicenseDeclared: "Apache-2.0", PrimaryPackagePurpose: "CONTAINER",
		Checksums:    []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: digest.Hex}},
		ExternalRefs: purl("oci", imageName, digest.String())}
	main := spdxPackage{Name: bin.info.Main.Path, SPDXID: "SPDXRef-Binary", VersionInfo: version, DownloadLocation: source,
		LicenseDeclared: "Apache-2.0", PrimaryPackagePurpose: "APPLICATION", ExternalRefs: purl("golang", bin.info.Main.Path, "v"+version)}
	ca := spdxPackage{Name: d.name, SPDXID: "SPDXRef-Deb-" + spdxID(d.name), VersionInfo: d.version, Supplier: "Organization: Debian",
		DownloadLocation: "NOASSERTION", PrimaryPackagePurpose: "LIBRARY",
		Checksums: []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: d.sha256}},
		ExternalRefs: []spdxRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl",
			ReferenceLocator: "pkg:deb/debian/" + d.name + "@" + url.PathEscape(d.version) + "?arch=" + d.arch}}}
	stdlib := spdxPackage{Name: "stdlib", SPDXID: "SPDXRef-Go-stdlib", VersionInfo: bin.info.GoVersion, DownloadLocation: "NOASSERTION",
		PrimaryPackagePurpose: "LIBRARY", ExternalRefs: purl("golang", "stdlib", bin.info.GoVersion)}
	doc.Packages = []spdxPackage{image, main, ca, stdlib}
	doc.Relationships = []spdxRelationship{
		{"SPDXRef-DOCUMENT", "DESCRIBES", image.SPDXID},
		{image.SPDXID, "CONTAINS", main.SPDXID},
		{image.SPDXID, "CONTAINS", ca.SPDXID},
		{main.SPDXID, "DEPENDS_ON", stdlib.SPDXID},
	}
	for _, m := range bin.info.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		p := spdxPackage{Name: m.Path, SPDXID: "SPDXRef-Go-" + spdxID(m.Path+"-"+m.Version), VersionInfo: m.Version,
			DownloadLocation: "NOASSERTION", PrimaryPackagePurpose: "LIBRARY", ExternalRefs: purl("golang", m.Path, m.Version)}
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships, spdxRelationship{main.SPDXID, "DEPENDS_ON", p.SPDXID})
	}
	return doc
}

// spdxID keeps what SPDX allows in an identifier: letters, digits, '.', '-'.
func spdxID(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '-'
	}, s)
}
