//! `occm-forge manifest merge` and `manifest record-signatures`.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use occm_forge::config::Minor;
use occm_forge::digest_manifest::{self, Signer};
use occm_forge::{Error, config, plan, report, sign, signatures};

use super::output::{note, print_stdout, warn};
use super::{Cli, RegistryArgs};

#[derive(Subcommand)]
pub enum ManifestCommand {
    /// Fold fragments written by `build --manifest-fragment` into the digest manifest.
    Merge(MergeArgs),
    /// Record the signature and attestations a signer made of each minor's pushed image (with
    /// `cosign sign` and `cosign attest`, keyless or with a key) in the digest manifest, for
    /// `verify` to check and `copy` to carry. Exit status 10 when a minor has no signature by
    /// the signer.
    RecordSignatures(RecordSignaturesArgs),
}

#[derive(Args)]
pub struct MergeArgs {
    /// Fragment files.
    #[arg(required = true, value_name = "FRAGMENT")]
    fragments: Vec<PathBuf>,
    /// images.toml (for the digest manifest's path).
    #[arg(long, default_value = "images.toml", value_name = "FILE")]
    config: PathBuf,
    /// Refuse at once when another run holds the digest manifest.
    #[arg(long)]
    no_wait: bool,
}

#[derive(Args)]
#[command(group = clap::ArgGroup::new("signer").required(true).args(["certificate_identity", "key"]))]
pub struct RecordSignaturesArgs {
    /// Minors whose images were signed (repeatable).
    #[arg(long = "k8s", value_name = "MINOR", required = true)]
    k8s: Vec<Minor>,
    /// Keyless: the identity the signing certificate names, as for `cosign verify
    /// --certificate-identity` (a GitHub workflow:
    /// https://github.com/<owner>/<repo>/.github/workflows/<file>@<ref>).
    #[arg(long, value_name = "IDENTITY", requires = "certificate_oidc_issuer")]
    certificate_identity: Option<String>,
    /// Keyless: the OIDC issuer the certificate names, as for `cosign verify
    /// --certificate-oidc-issuer` (GitHub Actions: https://token.actions.githubusercontent.com).
    #[arg(long, value_name = "URL", requires = "certificate_identity")]
    certificate_oidc_issuer: Option<String>,
    /// With a key: its public key (PEM, like cosign.pub).
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
    /// images.toml (for the digest manifest's path).
    #[arg(long, default_value = "images.toml", value_name = "FILE")]
    config: PathBuf,
    #[command(flatten)]
    registry: RegistryArgs,
    /// Refuse at once when another run holds the digest manifest.
    #[arg(long)]
    no_wait: bool,
}

pub async fn run(cli: &Cli, cmd: &ManifestCommand) -> Result<u8, Error> {
    let args = match cmd {
        ManifestCommand::Merge(args) => return merge(cli, args),
        ManifestCommand::RecordSignatures(args) => args,
    };
    let public_key = match &args.key {
        Some(path) => {
            let pem = std::fs::read_to_string(path)
                .map_err(|e| Error::Usage(format!("--key {}: {e}", path.display())))?;
            let fingerprint = sign::public_key_fingerprint(&pem)
                .map_err(|e| Error::Usage(format!("--key {}: {e}", path.display())))?;
            Some((fingerprint, pem))
        }
        None => None,
    };
    let signer = match (
        &public_key,
        &args.certificate_identity,
        &args.certificate_oidc_issuer,
    ) {
        (Some((fingerprint, public_key)), _, _) => Signer::Key {
            fingerprint,
            public_key,
        },
        (None, Some(identity), Some(issuer)) => Signer::Certificate { identity, issuer },
        _ => unreachable!("clap requires --key or both certificate flags"),
    };
    let config = config::load(&args.config)?;
    let registry = plan::registry(&config, &args.registry.overrides())?;
    let path = &config.digest_manifest;
    let _lock = lock(path, args.no_wait)?;
    let manifest = digest_manifest::read_existing(path)?;
    let mut unsigned = Vec::new();
    for minor in &args.k8s {
        let entry = manifest
            .images
            .get(minor)
            .ok_or_else(|| Error::Usage(format!("{}: no entry for {minor}", path.display())))?;
        let found = match signatures::find(&registry, entry, signer).await {
            Err(signatures::FindError::NotSigned(m)) => {
                unsigned.push(m);
                continue;
            }
            r => r?,
        };
        for other in &found.others {
            note(
                cli.quiet,
                &format!("{minor}: also signed by {other} (not recorded)"),
            );
        }
        for name in &found.missing {
            warn(&format!("{minor}: no {name} attestation by {signer}"));
        }
        let written = tokio::task::block_in_place(|| {
            digest_manifest::record_signature(path, *minor, &entry.digest, found.signature.clone())
        })?;
        note(
            cli.quiet,
            &format!(
                "{minor}: {} in {}",
                if written {
                    "recorded"
                } else {
                    "already recorded"
                },
                path.display()
            ),
        );
        print_stdout(&report::signature_recorded(*minor, entry, &found.signature))?;
    }
    if unsigned.is_empty() {
        Ok(0)
    } else {
        Err(Error::NotSigned(unsigned.join("; ")))
    }
}

fn lock(path: &std::path::Path, no_wait: bool) -> Result<digest_manifest::RunLock, Error> {
    Ok(tokio::task::block_in_place(|| {
        digest_manifest::lock_run(path, !no_wait, &mut |holder| {
            eprintln!(
                "occm-forge: waiting for another occm-forge run on {} ({holder})",
                path.display()
            )
        })
    })?)
}

fn merge(cli: &Cli, args: &MergeArgs) -> Result<u8, Error> {
    let config = config::load(&args.config)?;
    let path = &config.digest_manifest;
    let _lock = lock(path, args.no_wait)?;
    let merged = digest_manifest::merge(path, &args.fragments)?;
    note(cli.quiet, &report::merged(&merged, path));
    Ok(0)
}
