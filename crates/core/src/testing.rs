//! Test fixtures shared by the in-process tests: a small two-platform image assembled from fake
//! binaries on the static base into a temporary OCI layout, with SBOM and provenance referrers,
//! and the digest-manifest entry a build would record for it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::base::reference::RepositoryName;
use crate::config::Platform;
use crate::digest_manifest::Entry;
use crate::image::referrer::{self, Attachment};
use crate::image::{self, BuiltImage, base};

/// Where the fixture image lives and what describes it.
pub struct FixtureImage {
    /// Keeps the layout alive.
    pub _dir: tempfile::TempDir,
    /// The image in the layout.
    pub image: BuiltImage,
    /// SBOM per platform, then provenance.
    pub attachments: Vec<Attachment>,
    /// The target repository.
    pub repo: RepositoryName,
    /// The entry a published build records.
    pub entry: Entry,
}

impl FixtureImage {
    /// Publishes this image with its referrers to `reg` under its repository, in `mode`.
    ///
    /// Errors: as [`crate::registry::publish::publish`].
    pub async fn publish_to(
        &self,
        reg: &crate::registry::memory::MemoryRegistry,
        mode: crate::registry::publish::ReferrersMode,
    ) -> Result<crate::registry::publish::Published, crate::registry::RegistryError> {
        self.publish_as(reg, &self.repo, &self.attachments, mode)
            .await
    }

    /// Publishes this image with `attachments` to `reg` under `repo`, in `mode`.
    ///
    /// Errors: as [`crate::registry::publish::publish`].
    pub async fn publish_as(
        &self,
        reg: &crate::registry::memory::MemoryRegistry,
        repo: &RepositoryName,
        attachments: &[Attachment],
        mode: crate::registry::publish::ReferrersMode,
    ) -> Result<crate::registry::publish::Published, crate::registry::RegistryError> {
        crate::registry::publish::publish(reg, repo, &self.image, attachments, mode, &|_, _| {})
            .await
    }
}

/// The fixture image for `tag` (a different `tag` gives a different digest).
pub fn image(tag: &str) -> FixtureImage {
    let dir = tempfile::tempdir().expect("tempdir");
    let platforms: Vec<Platform> = ["linux/amd64", "linux/arm64"]
        .iter()
        .map(|p| p.parse().expect("platform"))
        .collect();
    let binaries: Vec<(Platform, PathBuf)> = platforms
        .iter()
        .map(|p| {
            let path = dir.path().join(format!("bin-{}", p.arch));
            std::fs::write(&path, format!("fake occm for {p}")).expect("write binary");
            (p.clone(), path)
        })
        .collect();
    let layout = dir.path().join("out");
    let base = base::static_base(&platforms, 0).expect("static base");
    let image = image::assemble(&image::ImageRequest {
        program: &crate::image::OCCM,
        binaries: &binaries,
        base: &base,
        tag,
        epoch: 0,
        source: "https://github.com/kubernetes/cloud-provider-openstack",
        revision: "63ec67a04b40fee4ff43fec11c3d31f2a90c9ad2",
        layout_dir: &layout,
        layer_cache: None,
    })
    .expect("assemble");
    let attachments = sbom_and_provenance(&layout, &image);
    let repo: RepositoryName = "registry.example/occm/openstack-cloud-controller-manager"
        .parse()
        .expect("repository");
    let entry = entry_of(&repo, tag, &platforms, &image, &attachments);
    FixtureImage {
        _dir: dir,
        image,
        attachments,
        repo,
        entry,
    }
}

/// One SBOM referrer per platform manifest and a provenance referrer of the index, attached in
/// `layout` (the provenance last).
fn sbom_and_provenance(layout: &std::path::Path, image: &BuiltImage) -> Vec<Attachment> {
    let mut attachments: Vec<Attachment> = image
        .platforms
        .iter()
        .map(|p| {
            referrer::attach(
                layout,
                &p.manifest,
                crate::pipeline::describe::SPDX_MEDIA_TYPE,
                format!("sbom of {}", p.platform).as_bytes(),
                0,
            )
            .expect("attach sbom")
        })
        .collect();
    attachments.push(
        referrer::attach(
            layout,
            &image.index,
            crate::pipeline::describe::IN_TOTO_MEDIA_TYPE,
            b"provenance",
            0,
        )
        .expect("attach provenance"),
    );
    attachments
}

/// The digest-manifest entry of the fixture `image` pushed to `repo` as `tag`.
fn entry_of(
    repo: &RepositoryName,
    tag: &str,
    platforms: &[Platform],
    image: &BuiltImage,
    attachments: &[Attachment],
) -> Entry {
    Entry {
        image: format!("{repo}:{tag}@{}", image.index.digest),
        repository: repo.to_string(),
        tag: tag.to_string(),
        digest: image.index.digest.clone(),
        published: true,
        upstream_tag: "v1.34.1".into(),
        upstream_commit: "63ec67a04b40fee4ff43fec11c3d31f2a90c9ad2".into(),
        patch_series_sha256: "0".repeat(64),
        patches: vec![],
        already_upstream: vec![],
        applied_three_way: Default::default(),
        platforms: platforms.iter().map(ToString::to_string).collect(),
        manifests: image
            .platforms
            .iter()
            .map(|p| (p.platform.to_string(), p.manifest.digest.clone()))
            .collect(),
        sbom: image
            .platforms
            .iter()
            .zip(attachments)
            .map(|(p, a)| (p.platform.to_string(), a.manifest.digest.clone()))
            .collect::<BTreeMap<_, _>>(),
        provenance: attachments.last().map(|a| a.manifest.digest.clone()),
        go_version: "1.25.1".into(),
        base_image: "static".into(),
        base_digest: None,
        source_date_epoch: 0,
        built_at: "2026-12-01T00:00:00Z".into(),
        inputs: None,
        accepted: false,
        accepted_scenarios: vec![],
        referrers: Some(crate::registry::publish::ReferrersPushed::Subject),
        signature: None,
        mirrors: vec![],
    }
}

/// An images.toml with one minor, 1.34, for the fixture image's repository.
pub fn config() -> crate::config::Config {
    crate::config::parse(
        std::path::Path::new("/x/images.toml"),
        r#"
repository = "registry.example/occm/openstack-cloud-controller-manager"
[minors."1.34"]
upstream_tag = "v1.34.1"
commit = "63ec67a04b40fee4ff43fec11c3d31f2a90c9ad2"
go = "1.25.1"
base = "static"
platforms = ["linux/amd64", "linux/arm64"]
revision = 1
patches = []
test_packages = ["./pkg/..."]
"#,
    )
    .expect("fixture images.toml")
}

/// The fixture image pushed with its referrers (OCI 1.1, with `subject`) to a fresh in-process
/// registry.
pub async fn published() -> (FixtureImage, crate::registry::memory::MemoryRegistry) {
    use crate::registry::publish;
    let f = image("v1.34.1-occmforge.1");
    let reg = crate::registry::memory::MemoryRegistry::new();
    f.publish_to(&reg, publish::ReferrersMode::Fallback)
        .await
        .expect("publish");
    (f, reg)
}

/// A published digest-manifest entry for `minor` at `repository`, tagged
/// `v<minor>.1-occmforge.1`, with the digest `sha256:<hex of fill>…`.
pub fn entry(minor: &str, repository: &str, fill: char) -> crate::digest_manifest::Entry {
    let digest = format!("sha256:{}", fill.to_string().repeat(64));
    let tag = format!("v{minor}.1-occmforge.1");
    crate::digest_manifest::Entry {
        image: format!("{repository}:{tag}@{digest}"),
        repository: repository.into(),
        tag,
        digest,
        published: true,
        mirrors: vec![],
        upstream_tag: format!("v{minor}.1"),
        upstream_commit: "c".repeat(40),
        patch_series_sha256: "d".repeat(64),
        patches: vec![],
        already_upstream: vec![],
        applied_three_way: Default::default(),
        platforms: vec!["linux/amd64".into()],
        manifests: Default::default(),
        sbom: Default::default(),
        provenance: None,
        go_version: "1.25.1".into(),
        base_image: "static".into(),
        base_digest: None,
        source_date_epoch: 0,
        built_at: "2026-12-01T00:00:00Z".into(),
        inputs: None,
        accepted: true,
        accepted_scenarios: vec![],
        referrers: None,
        signature: None,
    }
}

/// A keyless signer as Fulcio makes one, for tests: a fresh ECDSA P-256 key and a self-signed
/// certificate for it naming `identity` (a URI subject alternative name) and `issuer` (Fulcio's
/// extension 1.3.6.1.4.1.57264.1.8, a DER UTF8String).
pub struct CertificateSigner {
    key: crate::signing::SigningKey,
    certificate_der: Vec<u8>,
    _dir: tempfile::TempDir,
}

impl CertificateSigner {
    /// A signer whose certificate names `identity` and `issuer`.
    pub fn new(identity: &str, issuer: &str) -> Self {
        Self::with_uris(&[identity], issuer)
    }

    /// A signer whose certificate names each of `uris` (in order) and `issuer`.
    pub fn with_uris(uris: &[&str], issuer: &str) -> Self {
        use rcgen::{CertificateParams, CustomExtension, KeyPair, SanType};
        let pair = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key pair");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("leaf.key");
        std::fs::write(&path, pair.serialize_pem()).expect("write key");
        let key = crate::signing::SigningKey::load(&path, None).expect("load key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        for uri in uris {
            params
                .subject_alt_names
                .push(SanType::URI((*uri).try_into().expect("IA5 identity")));
        }
        let mut utf8 = vec![0x0c, u8::try_from(issuer.len()).expect("short issuer")];
        utf8.extend_from_slice(issuer.as_bytes());
        params
            .custom_extensions
            .push(CustomExtension::from_oid_content(
                &[1, 3, 6, 1, 4, 1, 57264, 1, 8],
                utf8,
            ));
        let cert = params.self_signed(&pair).expect("certificate");
        CertificateSigner {
            key,
            certificate_der: cert.der().to_vec(),
            _dir: dir,
        }
    }

    /// The certificate's public key, PEM.
    pub fn public_key_pem(&self) -> String {
        self.key.public_key_pem()
    }

    /// A Sigstore bundle v0.3 of `statement` as `cosign sign` keyless writes it (without its
    /// Rekor entry): the DSSE envelope, and the certificate as `verificationMaterial`.
    pub fn sign(&self, statement: &[u8]) -> Vec<u8> {
        use base64::Engine as _;
        let bundle = self.key.sign_statement(statement).expect("sign");
        let mut b: serde_json::Value = serde_json::from_slice(&bundle).expect("bundle JSON");
        b["verificationMaterial"] = serde_json::json!({
            "certificate": {
                "rawBytes": base64::engine::general_purpose::STANDARD.encode(&self.certificate_der)
            }
        });
        serde_json::to_vec(&b).expect("bundle JSON")
    }
}
