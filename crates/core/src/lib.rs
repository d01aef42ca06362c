//! occm-forge's core: turns an upstream release of kubernetes/cloud-provider-openstack into a
//! patched, tested, published and digest-pinned openstack-cloud-controller-manager (OCCM) image,
//! one per Kubernetes minor. A folder per layer, each importing only the ones before it (the
//! rules are docs/architecture.md's, checked by tests/architecture.rs):
//!
//! - [`base`]: digests, atomic writes, times, image references, Go releases, signals, an HTTP
//!   client's error chain said plainly.
//! - [`config`]: images.toml, validated with file:line:column.
//! - [`image`]: OCI types, deterministic layers, pure image composition, the OCI layout.
//! - [`kubernetes`]: the Kubernetes API for every command that talks to a cluster.
//! - [`registry`]: the `Registry` trait, its `oci-client` implementation, retries, credentials,
//!   referrers, base pulls and the push.
//! - [`signing`]: signing keys, statements and bundles; the signatures an image carries.
//! - [`digest_manifest`]: the digest manifest's format (entries, signatures, the YAML read and
//!   written) and what determines an image ([`digest_manifest::inputs`]); what its readers import.
//! - [`pipeline`]: the build — [`pipeline::build`] over its stages' implementations
//!   ([`pipeline::source`], [`pipeline::patches`], [`pipeline::go`], [`pipeline::describe`],
//!   [`pipeline::record`]) beside the stage trait ([`pipeline::stage`]) and the stages
//!   ([`pipeline::stages`]), the plan, [`pipeline::Error`], and the seam acceptance plugs into
//!   ([`pipeline::acceptance`]).
//! - [`consumers`]: what consumes the digest manifest — magnum-cluster-api's vocabulary
//!   ([`consumers::mcapi`]), under [`consumers::render`] and [`consumers::clusters`].
//! - [`commands`]: the commands built on them — [`commands::verify`], [`commands::prove`]
//!   (`patches prove`), [`commands::pin`], [`commands::upstream`], [`commands::copy`],
//!   [`commands::refresh`] (`patches edit`/`export`), [`commands::self_image`],
//!   [`commands::signatures`] (`manifest record-signatures`), and [`commands::report`] (the text
//!   every command prints); each command's own failure is a [`pipeline::Failure`].
//!
//! The binary only parses arguments, calls one of these, and prints.

#![warn(missing_docs)]

pub mod base;
pub mod commands;
pub mod config;
pub mod consumers;
pub mod digest_manifest;
pub mod image;
pub mod kubernetes;
pub mod pipeline;
pub mod registry;
pub mod signing;

#[cfg(test)]
mod testing;
