//! Base images: what an image is stacked on. The built-in `static` base is made here; a base pulled
//! from a registry arrives through `registry::pull` in the same [`ResolvedBase`] shape.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Value, json};

use super::ImageError;
use super::layer::{self, Entry};
use super::spec::{Descriptor, Family};
use crate::config::Platform;

/// The bytes of a base layer.
#[derive(Debug, Clone)]
pub enum LayerData {
    /// A verified blob in occm-forge's blob cache.
    Cached(PathBuf),
    /// Generated in memory (the static base).
    Inline(Vec<u8>),
}

/// One base layer.
#[derive(Debug, Clone)]
pub struct BaseLayer {
    /// Its descriptor as the base manifest lists it (or as generated).
    pub descriptor: Descriptor,
    /// Its diff_id from the base config.
    pub diff_id: String,
    /// Where its bytes are.
    pub data: LayerData,
}

/// The base for one platform.
#[derive(Debug, Clone)]
pub struct PlatformBase {
    /// Media-type family; our layer, config, manifest and index follow it.
    pub family: Family,
    /// The base config, to be extended (kept as JSON so unknown fields survive).
    pub config: Value,
    /// Base layers, bottom first.
    pub layers: Vec<BaseLayer>,
    /// Digest of the base's platform manifest (`org.opencontainers.image.base.digest`); `None` for static.
    pub manifest_digest: Option<String>,
}

/// A base resolved for every requested platform.
#[derive(Debug, Clone)]
pub struct ResolvedBase {
    /// `static`, or the reference as configured (e.g. `registry.k8s.io/build-image/go-runner:v2.4.0-go1.25.1-bookworm.0@sha256:…`).
    pub reference: String,
    /// The base's name without digest (`org.opencontainers.image.base.name`); `None` for static.
    pub name: Option<String>,
    /// The base's repository (`registry/path`), whose layers a push to the same registry can
    /// mount; `None` for static.
    pub repository: Option<String>,
    /// The digest the base was pulled by (its top-level manifest or index); `None` for static.
    pub digest: Option<String>,
    /// Per platform.
    pub platforms: BTreeMap<Platform, PlatformBase>,
}

/// Path of the CA bundle in the static base (Go's crypto/x509 reads it on Linux).
pub const CA_BUNDLE: &str = "etc/ssl/certs/ca-certificates.crt";
/// uid/gid of the `nonroot` user in the static base (as in distroless).
pub const NONROOT: u64 = 65532;

/// The built-in static base: one layer with a CA bundle (the Mozilla roots shipped by the
/// `webpki-root-certs` crate), `/etc/passwd` and `/etc/group` with `root` and `nonroot` (65532),
/// `/home/nonroot`, `/root` and `/tmp` (1777); config user `65532`, `PATH` and `WorkingDir /`.
pub fn static_base(platforms: &[Platform], epoch: i64) -> Result<ResolvedBase, ImageError> {
    let layer = layer::build(&static_entries(), epoch)
        .map_err(|e| ImageError::Io(format!("static base layer: {e}")))?;
    let mut out = BTreeMap::new();
    for p in platforms {
        let config = json!({
            "architecture": p.arch,
            "os": p.os,
            "config": {
                "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                "User": NONROOT.to_string(),
                "WorkingDir": "/",
            },
            "rootfs": {"type": "layers", "diff_ids": []},
            "history": [],
        });
        let mut descriptor = Descriptor::of(Family::Oci.layer_gzip(), &layer.blob);
        descriptor.digest = layer.digest.clone();
        out.insert(
            p.clone(),
            PlatformBase {
                family: Family::Oci,
                config,
                layers: vec![BaseLayer {
                    descriptor,
                    diff_id: layer.diff_id.clone(),
                    data: LayerData::Inline(layer.blob.clone()),
                }],
                manifest_digest: None,
            },
        );
    }
    Ok(ResolvedBase {
        reference: crate::config::STATIC_BASE.into(),
        name: None,
        repository: None,
        digest: None,
        platforms: out,
    })
}

/// The history entry for the static base layer.
pub const STATIC_HISTORY: &str = "occm-forge static base: CA certificates (webpki-root-certs), /etc/passwd, /etc/group, /home/nonroot, /tmp";

fn static_entries() -> Vec<Entry> {
    let mut bundle = String::new();
    for der in webpki_root_certs::TLS_SERVER_ROOT_CERTS {
        bundle.push_str("-----BEGIN CERTIFICATE-----\n");
        let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, der.as_ref());
        for chunk in b64.as_bytes().chunks(64) {
            bundle.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
            bundle.push('\n');
        }
        bundle.push_str("-----END CERTIFICATE-----\n");
    }
    let passwd = format!(
        "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:{NONROOT}:{NONROOT}:nonroot:/home/nonroot:/sbin/nologin\n"
    );
    let group = format!("root:x:0:\nnonroot:x:{NONROOT}:\n");
    let mut home = Entry::dir("home/nonroot", 0o700);
    home.owner = (NONROOT, NONROOT);
    vec![
        Entry::dir("bin", 0o755),
        Entry::dir("etc", 0o755),
        Entry::file("etc/group", 0o644, group.into_bytes()),
        Entry::file("etc/passwd", 0o644, passwd.into_bytes()),
        Entry::dir("etc/ssl", 0o755),
        Entry::dir("etc/ssl/certs", 0o755),
        Entry::file(CA_BUNDLE, 0o644, bundle.into_bytes()),
        Entry::dir("home", 0o755),
        home,
        Entry::dir("root", 0o700),
        Entry::dir("tmp", 0o1777),
    ]
}

impl Family {
    /// The family of a layer media type (gzip or uncompressed tar).
    pub fn of_layer(media_type: &str) -> Option<Family> {
        match media_type {
            super::spec::OCI_LAYER_GZIP | "application/vnd.oci.image.layer.v1.tar" => {
                Some(Family::Oci)
            }
            super::spec::DOCKER_LAYER_GZIP => Some(Family::Docker),
            _ => None,
        }
    }
}
