//! Acceptance in a simulated cloud (`occm-forge accept`): the image's own OCCM binary, and as
//! the control the unpatched upstream build of the same tag, run the way the Helm chart runs
//! them against a real etcd + kube-apiserver and a simulated OpenStack, through the bug report's
//! scenarios (see [`scenarios::Scenario`]).
//!
//! Parts: [`binary`] (ours out of the OCI layout; the control build), [`sim`] (the simulated
//! environment: [`sim::control_plane`] etcd and kube-apiserver built through the Go module proxy
//! or envtest's, cached per Kubernetes version, started on loopback; [`sim::cloud`] the simulated
//! Keystone, Nova and Neutron; [`sim::kube`] the API calls the scenarios make; Cluster API and its
//! stand-ins), [`scenarios`] and [`report`]. [`accept`] is the entry given everything as plain
//! data; [`accept_subject`] and [`prepare_subject`] derive it for one minor (building what is
//! needed) ([`Subject::from_config`] from images.toml), [`matrix`] for several minors,
//! [`record_run`] a run's row in the acceptance document;
//! [`simulation::Simulation`] is what `build --accept` runs, behind the core's `Acceptance`.
//!
//! The entries live in three files: `subject.rs` (one minor as the subject: [`Subject`],
//! [`accept_subject`], the chart, ours out of the layout, the control, [`record_run`], [`matrix`]),
//! `parts.rs` (the parts besides the image: [`prepare_subject`], [`cache_key`]) and `run.rs`
//! ([`AcceptRequest`], [`accept`]: the cloud, the benches, the scenarios on each side).

pub mod binary;
pub mod report;
pub mod scenarios;
pub mod sim;
pub mod simulation;

mod parts;
mod run;
mod subject;

pub use report::{
    AcceptReport, ScenarioRow, Verdict, document, render_markdown, require_accepted, write_document,
};
pub use scenarios::{Scenario, Side};

pub use sim::control_plane::APISERVER_READY_TIMEOUT;

pub use occm_forge_core::pipeline::acceptance::AcceptError;

pub(crate) use parts::*;
pub use parts::{PREPARED_FORMAT, PrepareReport, cache_key, prepare_subject};
pub(crate) use run::*;
pub use run::{AcceptRequest, accept};
pub(crate) use subject::*;
pub use subject::{MinorRequest, RunOptions, Subject, accept_subject, matrix, record_run};

#[cfg(test)]
mod tests {
    use super::*;
    use report::Verdict;

    fn subject() -> Subject {
        Subject {
            minor: "1.34".parse().unwrap(),
            upstream_tag: "v1.34.1".into(),
            commit: "0".repeat(40),
            go: "1.25.1".into(),
            tag: "v1.34.1-occmforge.1".into(),
            fetch_from: String::new(),
            config_name: "images.toml".into(),
            cluster_api: occm_forge_core::config::ClusterApi {
                version: "v1.13.2".into(),
                go: "1.25.0".into(),
            },
            repository: "registry.example/occm".into(),
            magnum_cluster_api: "0.38.2".into(),
            go_overrides: Default::default(),
            upstream_fixed: Vec::new(),
        }
    }

    /// A run that ended before a verdict: a layout without the image could not be tested
    /// (NOT VERIFIED), a bad image failed (FAILED), an interrupt has no report. Told by the
    /// error's variant, not by its text.
    #[test]
    fn a_layout_without_the_image_is_not_verified_and_a_bad_binary_failed() {
        let dir = tempfile::tempdir().unwrap();
        let platform = binary::host_platform().unwrap();
        let no_layout = binary::extract_from_layout(
            dir.path(),
            "v1.34.1-occmforge.1",
            &platform,
            &dir.path().join("occm"),
        )
        .unwrap_err();
        let no_layout = occm_forge_core::pipeline::Error::Accept(no_layout);
        let report = subject().report_of_error(&no_layout).unwrap();
        assert_eq!(report.verdict, Verdict::NotVerified);
        assert_eq!(report.reason.as_deref(), Some(&*no_layout.to_string()));
        assert!(
            no_layout
                .to_string()
                .contains("no OCI layout there (no index.json)"),
            "{no_layout}"
        );

        let script = dir.path().join("occm-script");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        let not_elf =
            binary::check_binary(&script, &platform, "image v1.34.1-occmforge.1").unwrap_err();
        let not_elf = occm_forge_core::pipeline::Error::Accept(not_elf);
        let report = subject().report_of_error(&not_elf).unwrap();
        assert_eq!(report.verdict, Verdict::Failed, "{not_elf}");

        let interrupted = occm_forge_core::pipeline::Error::Interrupted(2);
        assert!(subject().report_of_error(&interrupted).is_none());
    }
}
