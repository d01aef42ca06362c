//! Each command's "Examples:" block (its `after_help`, shown by `-h` and `--help`, in the man
//! pages and in docs/reference/cli.md), kept in one table and attached to the clap definitions
//! by [`attach`]. Every line is a `# comment` or a whole `occm-forge …` invocation; what follows a
//! shell operator (`<`, `>`, `|`) is the shell's. tests/cli_reference.rs reads them back from
//! the real binary's help and checks each parses (`occm-forge __parse-check -- …`).

use clap::Command;

/// (the command's path below `occm-forge`, space-separated, "" for the root; its example lines).
const EXAMPLES: &[(&str, &[&str])] = &[
    (
        "",
        &[
            "# Build 1.34 from a local checkout on the built-in static base, then accept it",
            "occm-forge build --k8s 1.34 --source ~/src/cloud-provider-openstack --base static",
            "occm-forge accept --k8s 1.34 --source ~/src/cloud-provider-openstack --layout out",
        ],
    ),
    (
        "build",
        &[
            "# 1.34 from a local checkout on the built-in static base (offline), into the layout out/",
            "occm-forge build --k8s 1.34 --source ~/src/cloud-provider-openstack --base static --output out",
            "# CI: build and push 1.34, its entry in a fragment (folded in by `manifest merge`)",
            "occm-forge build --k8s 1.34 --push --manifest-fragment fragments/1.34.yaml",
        ],
    ),
    (
        "doctor",
        &[
            "# What `build --k8s 1.34 --accept --push` needs on this machine",
            "occm-forge doctor --k8s 1.34 --accept --push",
        ],
    ),
    (
        "verify",
        &[
            "# Does the registry serve what the digest manifest records for 1.34?",
            "occm-forge verify --k8s 1.34",
            "# ...and do its pins rebuild to the same digest?",
            "occm-forge verify --k8s 1.34 --rebuild --source ~/src/cloud-provider-openstack",
        ],
    ),
    (
        "pin",
        &[
            "# Move 1.34 to upstream's tag v1.34.2 (commit, Go version and base from that tag)",
            "occm-forge pin --k8s 1.34 --tag v1.34.2",
            "# Move 1.35 to a supported Go line (as `upstream check` proposes)",
            "occm-forge pin --k8s 1.35 --go current",
        ],
    ),
    (
        "upstream",
        &["occm-forge upstream check --json --source ~/mirrors/cloud-provider-openstack.git"],
    ),
    (
        "upstream check",
        &[
            "# Exit 0 nothing new, 11 something new (a tag, a minor, a Go release), 13 a pinned tag moved",
            "occm-forge upstream check",
            "occm-forge upstream check --json --source ~/mirrors/cloud-provider-openstack.git",
        ],
    ),
    (
        "render",
        &[
            "# Magnum labels for a cluster whose container_infra_prefix holds the image",
            "occm-forge render --k8s 1.34 --format magnum-tag --prefix registry.cloud.example/magnum",
            "# A running cluster's Secret (kubectl get secret -n magnum-system <stack_id>-cloud-provider -o yaml)",
            "occm-forge render --format crs-secret --k8s 1.34 < secret.yaml > secret.json",
        ],
    ),
    (
        "copy",
        &[
            "occm-forge copy --k8s 1.34 --to registry.cloud.example/magnum/openstack-cloud-controller-manager",
        ],
    ),
    (
        "minors",
        &[
            "# [\"1.31\", …] for a CI matrix, only minors not past their end of life",
            "occm-forge minors --supported",
        ],
    ),
    ("manifest", &["occm-forge manifest merge fragments/*.yaml"]),
    (
        "manifest merge",
        &[
            "# Fold the fragments of parallel `build --manifest-fragment` jobs into the digest manifest",
            "occm-forge manifest merge fragments/*.yaml",
        ],
    ),
    (
        "manifest record-signatures",
        &[
            "occm-forge manifest record-signatures --k8s 1.34 --key cosign.pub",
            "occm-forge manifest record-signatures --k8s 1.34 --certificate-identity https://github.com/example/occm-forge/.github/workflows/build.yml@refs/heads/main --certificate-oidc-issuer https://token.actions.githubusercontent.com",
        ],
    ),
    (
        "patches",
        &[
            "occm-forge patches prove --k8s 1.34",
            "occm-forge patches matrix --output docs/patch-matrix.md",
        ],
    ),
    (
        "patches prove",
        &["occm-forge patches prove --k8s 1.34 --source ~/src/cloud-provider-openstack --json"],
    ),
    (
        "patches matrix",
        &["occm-forge patches matrix --k8s 1.33 --k8s 1.34 --output docs/patch-matrix.md"],
    ),
    (
        "patches edit",
        &[
            "occm-forge patches edit --k8s 1.36",
            "# After resolving the conflict (and `git add`)",
            "occm-forge patches edit --k8s 1.36 --continue",
        ],
    ),
    (
        "patches export",
        &[
            "# After `patches edit` applied the whole series",
            "occm-forge patches export --k8s 1.36",
        ],
    ),
    (
        "accept",
        &[
            "occm-forge accept --k8s 1.34 --source ~/src/cloud-provider-openstack --layout out",
            "occm-forge accept --all --source ~/src/cloud-provider-openstack --layout out --output docs/acceptance.md",
        ],
    ),
    (
        "clusters",
        &[
            "occm-forge clusters -n magnum-system --json",
            "# What deploy/clusters/ runs in the management cluster",
            "occm-forge clusters --fix --watch --resync 60",
        ],
    ),
    (
        "self-image",
        &[
            "occm-forge self-image --source-url https://git.example/occm-forge --revision 3a35209 --tag 0.1.0-3a35209 --push --repository registry.example.internal/occm/occm-forge",
        ],
    ),
    (
        "completions",
        &[
            "occm-forge completions bash > ~/.local/share/bash-completion/completions/occm-forge",
            "occm-forge completions fish > ~/.config/fish/completions/occm-forge.fish",
        ],
    ),
    (
        "generate-docs",
        &[
            "# docs/man/*.1 and docs/reference/cli.md, as committed",
            "occm-forge generate-docs --out-dir docs",
        ],
    ),
];

/// `cmd` (the root) with each command's examples as its `after_help`. Panics when the table names
/// a command that does not exist (any run of the binary shows it).
pub fn attach(mut cmd: Command) -> Command {
    for (path, lines) in EXAMPLES {
        let path: Vec<&str> = path.split_whitespace().collect();
        cmd = with_examples(cmd, &path, lines);
    }
    cmd
}

fn with_examples(cmd: Command, path: &[&str], lines: &[&str]) -> Command {
    match path.split_first() {
        None => {
            let mut text = String::from("Examples:");
            for line in lines {
                text.push_str("\n  ");
                text.push_str(line);
            }
            cmd.after_help(text)
        }
        Some((first, rest)) => {
            assert!(
                cmd.find_subcommand(first).is_some(),
                "examples for `{first}`, which `{}` does not have",
                cmd.get_name()
            );
            // In place: `mut_subcommand` would move it to the end of the help's list.
            cmd.mut_subcommands(|sub| {
                if sub.get_name() == *first {
                    with_examples(sub, rest, lines)
                } else {
                    sub
                }
            })
        }
    }
}
