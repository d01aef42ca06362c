//! `atmosphere-vars`: `atmosphere_image_overrides:` with one
//! `openstack_cloud_controller_manager_<major>_<minor>: "{{ atmosphere_image_prefix }}<image>"`
//! per minor. Atmosphere merges overrides only from that key (`roles/defaults/vars/main.yml:251`);
//! no Atmosphere role reads an OCCM key, so the only effect is that Atmosphere mirrors the image.

use crate::config::Minor;
use crate::digest_manifest::Entry;

/// The opening of the output, before the one entry per minor.
pub const HEADER: &str = "# Atmosphere merges these into atmosphere_images (roles/defaults/vars/main.yml); it then\n# mirrors them. No Atmosphere role deploys OCCM from them.\natmosphere_image_overrides:\n";

/// One minor's line; warns (once per registry) about a registry with a port, which Atmosphere's
/// image test and Renovate regex split wrongly.
pub fn vars(minor: Minor, e: &Entry, warnings: &mut Vec<String>) -> String {
    let registry = e.repository.split('/').next().unwrap_or_default();
    if registry.contains(':') && !warnings.iter().any(|w| w.contains(registry)) {
        warnings.push(format!(
            "registry {registry} has a port: Atmosphere's TestImageExist splits the reference at the first ':' (roles/defaults/vars_test.go:58) and its Renovate regex reads the name as [^:]+ (renovate.json:34), so both break; serve the image from a registry name without a port"
        ));
    }
    format!(
        "  openstack_cloud_controller_manager_{}_{}: \"{{{{ atmosphere_image_prefix }}}}{}\"\n",
        minor.major, minor.minor, e.image
    )
}
