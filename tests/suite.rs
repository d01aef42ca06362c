//! The integration tests, one binary: every file beside this one is a module of it (`cargo test
//! --test suite accept::` runs those of tests/accept.rs). One binary links once where 41 linked
//! the whole dependency graph each, and its tests run side by side, not one file after another.

mod common;
mod management;

mod accept;
mod accept_prepare;
mod alerts;
mod architecture;
mod bad_inputs;
mod build_e2e;
mod buildinfo;
mod cli_reference;
mod clusters;
mod completions;
mod consumers;
mod docs_book;
mod environment;
mod faults;
mod golden;
mod guards;
mod interrupt;
mod mcapi_apiserver;
mod mcapi_upgrade;
mod overrides;
mod patch_forms;
mod patch_line_endings;
mod patch_refresh;
mod patch_refresh_real;
mod patch_three_way;
mod patches_verify;
mod pin;
mod preflight;
mod proxy;
mod registry_auth;
mod registry_quirks;
mod release_flow;
mod renovate;
mod reproducible;
mod sbom_conformance;
mod self_image;
mod signing;
mod up_to_date;
mod upstream;
mod verify_registry;
mod watch_refresh;
mod workflows;
