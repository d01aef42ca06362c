// Command sbom-scanners reads an SPDX 2.3 JSON SBOM the way two vulnerability scanners do, with
// their own code, and says per scanner which version of a package it takes and whether that
// version lies in a vulnerable range. tests/sbom_conformance.rs runs it on occm-forge's SBOMs.
//
//	sbom-scanners SBOM.spdx.json PACKAGE RANGE
//
// RANGE is a constraint such as "< 1.26.9". Prints one JSON object per line and scanner:
// {"scanner", "package", "version", "ecosystem", "cpes", "in_range", "error"}. "error" is set when
// the scanner cannot read the SBOM, does not find the package, or cannot compare its version
// (the scanner then reports no vulnerability of it). Exit status 0 when every scanner compared.
//
//   - Trivy v0.74.0: pkg/sbom.Decode (the package's version is its purl's version) and the Go
//     ecosystem's comparer, pkg/detector/library/compare.GenericComparer.
//   - Grype v0.121.3: syft's SPDX decoder (the version is versionInfo), grype/pkg.New, and the
//     version format and constraint of the package (grype/version).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	grypepkg "github.com/anchore/grype/grype/pkg"
	grypeversion "github.com/anchore/grype/grype/version"
	"github.com/anchore/syft/syft/format"
	dbTypes "github.com/aquasecurity/trivy-db/pkg/types"
	"github.com/aquasecurity/trivy/pkg/detector/library/compare"
	trivysbom "github.com/aquasecurity/trivy/pkg/sbom"
)

type result struct {
	Scanner   string   `json:"scanner"`
	Package   string   `json:"package"`
	Version   string   `json:"version"`
	Ecosystem string   `json:"ecosystem"`
	CPEs      []string `json:"cpes"`
	InRange   bool     `json:"in_range"`
	Error     string   `json:"error,omitempty"`
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: sbom-scanners SBOM.spdx.json PACKAGE RANGE")
		os.Exit(2)
	}
	doc, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "sbom-scanners:", err)
		os.Exit(2)
	}
	name, constraint := os.Args[2], os.Args[3]
	results := []result{trivy(doc, name, constraint), grype(doc, name, constraint)}
	status := 0
	out := json.NewEncoder(os.Stdout)
	for _, r := range results {
		if r.Error != "" {
			status = 1
		}
		_ = out.Encode(r)
	}
	os.Exit(status)
}

func trivy(doc []byte, name, constraint string) result {
	r := result{Scanner: "trivy v0.74.0", Package: name}
	sbom, err := trivysbom.Decode(context.Background(), bytes.NewReader(doc), trivysbom.FormatSPDXJSON)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	for _, app := range sbom.Applications {
		for _, p := range app.Packages {
			if p.Name != name {
				continue
			}
			r.Version = p.Version
			r.Ecosystem = string(app.Type)
			// The comparer Trivy's library driver uses for Go binaries and modules; it logs and
			// reports "not vulnerable" for a version it cannot parse.
			advisory := dbTypes.Advisory{VulnerableVersions: []string{constraint}}
			if _, perr := parseTrivy(p.Version); perr != nil {
				r.Error = perr.Error()
				return r
			}
			r.InRange = compare.GenericComparer{}.IsVulnerable(p.Version, advisory)
			return r
		}
	}
	r.Error = "no package " + name
	return r
}

func grype(doc []byte, name, constraint string) result {
	r := result{Scanner: "grype v0.121.3", Package: name}
	s, _, _, err := format.Decode(bytes.NewReader(doc))
	if err != nil {
		r.Error = err.Error()
		return r
	}
	if s == nil {
		r.Error = "not an SBOM syft reads"
		return r
	}
	for sp := range s.Artifacts.Packages.Enumerate() {
		if sp.Name != name {
			continue
		}
		p := grypepkg.New(sp)
		r.Version = p.Version
		r.Ecosystem = string(p.Type)
		for _, c := range p.CPEs {
			r.CPEs = append(r.CPEs, c.Attributes.BindToFmtString())
		}
		// The format of the Go ecosystem's advisories (grype/db: version.ParseFormat of the type).
		f := grypeversion.ParseFormat(string(p.Type))
		v := grypeversion.New(p.Version, f)
		if err := v.Validate(); err != nil {
			r.Error = fmt.Sprintf("version %q (%s): %v", p.Version, f, err)
			return r
		}
		c, err := grypeversion.GetConstraint(constraint, f)
		if err != nil {
			r.Error = err.Error()
			return r
		}
		ok, err := c.Satisfied(v)
		if err != nil {
			r.Error = err.Error()
			return r
		}
		r.InRange = ok
		return r
	}
	r.Error = "no package " + name
	return r
}

// parseTrivy is the parse Trivy's GenericComparer runs first (aquasecurity/go-version).
func parseTrivy(v string) (string, error) {
	if strings.TrimSpace(v) == "" {
		return "", fmt.Errorf("empty version")
	}
	if _, err := goversionParse(v); err != nil {
		return "", fmt.Errorf("version %q: %v", v, err)
	}
	return v, nil
}
