//! `occm-forge manifest merge` and `manifest record-signatures`.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use occm_forge_core::commands::report;
use occm_forge_core::commands::signatures;
use occm_forge_core::config::Minor;
use occm_forge_core::digest_manifest::{self, Signer};
use occm_forge_core::pipeline::Error;
use occm_forge_core::pipeline::plan;
use occm_forge_core::pipeline::record;
use occm_forge_core::signing;

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
    #[command(flatten)]
    config: super::ConfigArg,
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
    #[arg(
        long,
        value_name = "IDENTITY",
        requires = "certificate_oidc_issuer",
        value_parser = clap::builder::NonEmptyStringValueParser::new()
    )]
    certificate_identity: Option<String>,
    /// Keyless: the OIDC issuer the certificate names, as for `cosign verify
    /// --certificate-oidc-issuer` (GitHub Actions: https://token.actions.githubusercontent.com).
    #[arg(
        long,
        value_name = "URL",
        requires = "certificate_identity",
        value_parser = clap::builder::NonEmptyStringValueParser::new()
    )]
    certificate_oidc_issuer: Option<String>,
    /// With a key: its public key (PEM, like cosign.pub; ECDSA P-256, what `cosign
    /// generate-key-pair` makes).
    #[arg(long, value_name = "FILE", conflicts_with = "certificate_oidc_issuer")]
    key: Option<PathBuf>,
    #[command(flatten)]
    config: super::ConfigArg,
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
            let fingerprint = signing::public_key_fingerprint(&pem)
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
    let config = args.config.load()?;
    let registry = plan::registry(&config, &args.registry.overrides())?;
    let path = &config.digest_manifest;
    let _lock = lock(path, args.no_wait)?;
    let manifest = digest_manifest::read_existing(path)?;
    let mut minors = args.k8s.clone();
    minors.sort();
    minors.dedup();
    // Every minor is tried and each failure named; the exit status is 10 when a minor has no
    // signature by the signer, else that of the first failure.
    let mut failures: Vec<Error> = Vec::new();
    for minor in minors {
        let Some(entry) = manifest.images.get(&minor) else {
            failures.push(Error::Usage(format!(
                "{}: no entry for {minor}",
                path.display()
            )));
            continue;
        };
        let found = match signatures::find(&registry, entry, signer).await {
            Err(e @ (signatures::FindError::NotSigned(_) | signatures::FindError::Usage(_))) => {
                failures.push(e.into());
                continue;
            }
            r => r?,
        };
        record_found(cli, path, minor, entry, &found)?;
    }
    let Some(chosen) = failures
        .iter()
        .position(|e| {
            e.failure::<occm_forge_core::commands::signatures::NotSigned>()
                .is_some()
        })
        .or((!failures.is_empty()).then_some(0))
    else {
        return Ok(0);
    };
    let chosen = failures.remove(chosen);
    for e in &failures {
        super::output::print_error(e);
    }
    Err(chosen)
}

/// Records what [`signatures::find`] found for `minor`, saying what changes.
fn record_found(
    cli: &Cli,
    path: &std::path::Path,
    minor: Minor,
    entry: &digest_manifest::Entry,
    found: &signatures::Found,
) -> Result<(), Error> {
    let signer = found
        .signature
        .signer()
        .map_err(|e| Error::Usage(format!("{minor}: {e}")))?;
    for other in &found.others {
        note(
            cli.quiet,
            &format!("{minor}: also signed by {other} (not recorded)"),
        );
    }
    for name in &found.missing {
        warn(&format!("{minor}: no {name} attestation by {signer}"));
    }
    let before = entry.signature.as_ref().and_then(|s| s.signer().ok());
    let written = tokio::task::block_in_place(|| {
        record::record_signature(path, minor, &entry.digest, found.signature.clone())
    })?;
    if !written {
        note(
            cli.quiet,
            &format!("{minor}: already recorded in {}", path.display()),
        );
    } else {
        let replaced = match before {
            Some(b) if b != signer => format!(", replacing the signature by {b}"),
            _ => String::new(),
        };
        note(
            cli.quiet,
            &format!("{minor}: recorded in {}{replaced}", path.display()),
        );
        if let Some(line) = record::mirrors_lack_new_bundles(minor, &entry.mirrors) {
            warn(&line);
        }
    }
    print_stdout(&report::signature_recorded(minor, entry, &found.signature))
}

fn lock(path: &std::path::Path, no_wait: bool) -> Result<record::RunLock, Error> {
    Ok(record::take_run_lock(path, !no_wait)?)
}

fn merge(cli: &Cli, args: &MergeArgs) -> Result<u8, Error> {
    let config = args.config.load()?;
    let path = &config.digest_manifest;
    let _lock = lock(path, args.no_wait)?;
    let merged = record::merge(path, &args.fragments)?;
    note(cli.quiet, &report::merged(&merged, path));
    Ok(0)
}
