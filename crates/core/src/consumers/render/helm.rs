//! `helm-values`: `image.repository` and `image.tag: "<tag>@sha256:<hex>"` for the OCCM chart,
//! which has no digest field; its DaemonSet writes `"{{ .Values.image.repository }}:{{ default
//! .Chart.AppVersion .Values.image.tag }}"` (chart `templates/daemonset.yaml:48`), so the tag
//! carries the digest.

use super::pinned_tag;
use crate::digest_manifest::Entry;

/// One entry's values document.
pub fn values(e: &Entry) -> String {
    format!(
        "image:\n  repository: {}\n  tag: \"{}\"\n",
        e.repository,
        pinned_tag(e)
    )
}
