//! `occm-forge self-image`: occm-forge's own image (the `self_image` module), written as an OCI
//! layout and pushed with `--push`.

use std::path::PathBuf;

use clap::Args;
use occm_forge_core::base::reference::RepositoryName;
use occm_forge_core::commands::self_image::{self, SelfImageRequest};
use occm_forge_core::config::Platform;
use occm_forge_core::pipeline::Error;
use occm_forge_core::pipeline::plan;
use occm_forge_core::registry::publish::{self, ReferrersMode};

use super::RegistryArgs;
use super::output::{note, print_stdout};

#[derive(Args)]
pub struct SelfImageArgs {
    /// The occm-forge binary to package (statically linked) [default: this occm-forge].
    #[arg(long, value_name = "PATH")]
    binary: Option<PathBuf>,
    /// Its platform, os/arch [default: the host's].
    #[arg(long, value_name = "OS/ARCH")]
    platform: Option<Platform>,
    /// Where occm-forge's source lives (org.opencontainers.image.source).
    #[arg(long, value_name = "URL")]
    source_url: String,
    /// The commit it was built from (org.opencontainers.image.revision).
    #[arg(long, value_name = "COMMIT")]
    revision: String,
    /// Image tag [default: occm-forge's version].
    #[arg(long, value_name = "TAG")]
    tag: Option<String>,
    /// OCI image layout directory.
    #[arg(long, default_value = "out-self", value_name = "DIR")]
    output: PathBuf,
    /// Push to --repository and verify the tag.
    #[arg(long, requires = "repository")]
    push: bool,
    /// Target repository (registry/path, no tag).
    #[arg(long, value_name = "REPO")]
    repository: Option<String>,
    #[command(flatten)]
    registry: RegistryArgs,
}

pub async fn run(args: &SelfImageArgs, quiet: bool) -> Result<u8, Error> {
    let binary = match &args.binary {
        Some(b) => b.clone(),
        None => std::env::current_exe()
            .map_err(|e| Error::Io(format!("the path of this occm-forge: {e}")))?,
    };
    let platform = match &args.platform {
        Some(p) => p.clone(),
        None => occm_forge_accept::binary::host_platform()?,
    };
    let tag = args
        .tag
        .clone()
        .unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_string());
    if !occm_forge_core::base::util::is_valid_tag(&tag) {
        return Err(Error::Usage(format!(
            "--tag {tag}: not an OCI tag ([A-Za-z0-9_][A-Za-z0-9._-]{{0,127}})"
        )));
    }
    let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(s) => s
            .trim()
            .parse::<i64>()
            .map_err(|_| Error::Usage(format!("SOURCE_DATE_EPOCH={s} is not a number")))?,
        Err(_) => 0,
    };
    let repo = match &args.repository {
        Some(r) => Some(
            r.parse::<RepositoryName>()
                .map_err(|e| Error::Usage(format!("--repository {r}: {e}")))?,
        ),
        None => None,
    };
    let built = self_image::assemble(&SelfImageRequest {
        binary: &binary,
        platform: &platform,
        tag: &tag,
        source: &args.source_url,
        revision: &args.revision,
        epoch,
        layout_dir: &args.output,
    })?;
    note(
        quiet,
        &format!(
            "self-image {} ({platform}) {} in {}",
            tag,
            built.index.digest,
            args.output.display()
        ),
    );
    let Some(repo) = repo.filter(|_| args.push) else {
        print_stdout(&format!("oci:{}:{tag}\n", args.output.display()))?;
        return Ok(0);
    };
    let registry = plan::registry_with(&[], &[], &args.registry.overrides())?;
    // Tags never move: a tag that serves another image is refused (a rerun of the same bytes is
    // fine).
    use occm_forge_core::registry::Registry as _;
    if let Some(served) = registry
        .manifest_digest(&repo, &tag)
        .await
        .map_err(Error::Publish)?
        .filter(|d| *d != built.index.digest)
    {
        return Err(Error::Publish(occm_forge_core::registry::RegistryError {
            registry: repo.registry.clone(),
            operation: format!("push {}:{tag}", repo.path),
            message: format!(
                "the tag already serves {served}, another image than this one's {}; tags never move: give another --tag",
                built.index.digest
            ),
            kind: occm_forge_core::registry::ErrorKind::Other,
        }));
    }
    let published = publish::publish(
        &registry,
        &repo,
        &built,
        &[],
        ReferrersMode::Skip,
        &|_, _| {},
    )
    .await
    .map_err(Error::Publish)?;
    print_stdout(&format!("{}\n", published.reference))?;
    Ok(0)
}
