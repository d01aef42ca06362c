package main

import "github.com/aquasecurity/go-version/pkg/version"

func goversionParse(v string) (version.Version, error) { return version.Parse(v) }
