//! The `describe` stage: an SPDX SBOM per platform image and the build's SLSA provenance, written
//! as files under `<output>/attestations/<tag>/` and into the layout as OCI 1.1 referrers.

use std::collections::BTreeMap;
use std::path::Path;

use async_trait::async_trait;

use crate::base::util::{short, write_file_atomically};
use crate::image::referrer::{self, Attachment};
use crate::image::{ImageError, PlatformImage, layout};
use crate::pipeline::Error;
use crate::pipeline::describe::{self, PatchRef};
use crate::pipeline::go::build::{self as gobuild, Binary};
use crate::pipeline::plan::BuildPlan;
use crate::pipeline::source::SourceTree;
use crate::pipeline::stage::{Done, Stage, StageContext};

use super::image::Imaged;

/// What the describe stage hands on.
#[derive(Debug, Clone)]
pub struct Described {
    /// Every referrer written into the layout (SBOMs, then the provenance), to be pushed.
    pub attachments: Vec<Attachment>,
    /// Platform → digest of the SBOM referrer manifest.
    pub sboms: BTreeMap<String, String>,
    /// Digest of the provenance referrer manifest.
    pub provenance: String,
}

/// Describes the image `imaged` built by `plan` from `tree` and `binaries`.
pub struct DescribeStage<'a> {
    /// The build plan.
    pub plan: &'a BuildPlan,
    /// The checked-out source (commit).
    pub tree: &'a SourceTree,
    /// The binaries, in the image's platform order.
    pub binaries: &'a [Binary],
    /// The image and its base.
    pub imaged: &'a Imaged,
    /// Seconds since the epoch used inside the image.
    pub epoch: i64,
}

#[async_trait]
impl Stage for DescribeStage<'_> {
    type Output = Described;

    fn name(&self) -> &'static str {
        "describe"
    }

    async fn run(self, _: &StageContext<'_>) -> Result<Done<Described>, Error> {
        let dir = self.plan.output.join("attestations").join(&self.plan.tag);
        let mut attachments = Vec::new();
        let mut sboms = BTreeMap::new();
        for (pi, bin) in self.imaged.image.platforms.iter().zip(self.binaries) {
            let a = self.sbom(pi, &bin.path, &dir)?;
            sboms.insert(pi.platform.to_string(), a.manifest.digest.clone());
            attachments.push(a);
        }
        let a = self.provenance(&dir)?;
        let provenance = a.manifest.digest.clone();
        attachments.push(a);
        let out = &self.plan.output;
        let referrers: Vec<_> = attachments.iter().map(|a| a.manifest.clone()).collect();
        let removed = layout::add_referrers(out, &referrers)
            .and_then(|_| layout::gc(out))
            .map_err(io(out))?;
        let mut detail = format!(
            "SPDX SBOM per platform, SLSA provenance {}",
            short(&provenance)
        );
        if removed > 0 {
            detail.push_str(&format!(
                "; {removed} unreferenced {} removed from {}",
                crate::base::util::plural(removed, "blob", "s"),
                out.display()
            ));
        }
        Ok(Done::new(
            Described {
                attachments,
                sboms,
                provenance,
            },
            detail,
        ))
    }
}

impl DescribeStage<'_> {
    /// One platform's SBOM: file and referrer.
    fn sbom(&self, pi: &PlatformImage, binary: &Path, dir: &Path) -> Result<Attachment, Error> {
        let plan = self.plan;
        let info = gobuild::read_build_info(&plan.toolchain, &self.tree.path, binary)?;
        let base = &self.imaged.base;
        let base_manifest = base
            .platforms
            .get(&pi.platform)
            .and_then(|b| b.manifest_digest.as_deref());
        let platform = pi.platform.to_string();
        let doc = describe::spdx_sbom(&describe::SbomInput {
            repository: &plan.repository,
            tag: &plan.tag,
            platform: &platform,
            arch: &pi.platform.arch,
            manifest_digest: &pi.manifest.digest,
            build_info: &info,
            upstream_tag: &plan.upstream_tag,
            upstream_commit: &self.tree.commit,
            upstream_url: &plan.upstream,
            base: base.name.as_deref().zip(base_manifest),
            epoch: self.epoch,
        });
        let file = dir.join(format!("sbom.{}.spdx.json", platform.replace('/', "-")));
        write_file_atomically(&file, &doc).map_err(io(dir))?;
        referrer::attach(
            &plan.output,
            &pi.manifest,
            describe::SPDX_MEDIA_TYPE,
            &doc,
            self.epoch,
        )
        .map_err(io(dir))
    }

    /// The build's provenance: file and referrer of the index.
    fn provenance(&self, dir: &Path) -> Result<Attachment, Error> {
        let plan = self.plan;
        let image = &self.imaged.image;
        let manifests: BTreeMap<String, String> = image
            .platforms
            .iter()
            .map(|pi| (pi.platform.to_string(), pi.manifest.digest.clone()))
            .collect();
        let hashes: Vec<(String, String)> = plan
            .series
            .iter()
            .map(|f| (f.name.clone(), f.sha256()))
            .collect();
        let patches: Vec<PatchRef<'_>> = hashes
            .iter()
            .map(|(name, sha256)| PatchRef { name, sha256 })
            .collect();
        let doc = describe::slsa_provenance(&describe::ProvenanceInput {
            repository: &plan.repository,
            tag: &plan.tag,
            index_digest: &image.index.digest,
            minor: &plan.minor.to_string(),
            upstream_url: &plan.upstream,
            upstream_tag: &plan.upstream_tag,
            upstream_commit: &self.tree.commit,
            patches: &patches,
            series_sha256: &plan.series_sha256,
            platforms: &plan.platform_names(),
            manifests: &manifests,
            go_version: &plan.toolchain.version,
            go_env: &crate::pipeline::go::platforms_env(&plan.platforms),
            ldflags: &gobuild::ldflags(&plan.binary_version()),
            go_overrides: &plan.go_overrides,
            base: (&plan.base_text, self.imaged.base.digest.as_deref()),
            epoch: self.epoch,
        });
        write_file_atomically(&dir.join("provenance.intoto.json"), &doc).map_err(io(dir))?;
        referrer::attach(
            &plan.output,
            &image.index,
            describe::IN_TOTO_MEDIA_TYPE,
            &doc,
            self.epoch,
        )
        .map_err(io(dir))
    }
}

/// An attestation I/O error, as the image stage words it (`image: image layout: <dir>: …`).
fn io(dir: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::Image(ImageError::Io(crate::base::disk::write_failed(dir, &e)))
}
