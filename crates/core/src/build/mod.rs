//! The build of one minor's image: the stage trait and its runner ([`stage`]), each stage's
//! implementation — one public entry taking plain data — ([`source`], [`patches`], [`go`] (test,
//! build), [`describe`], [`digest_manifest`] (the record); the image is [`crate::image`], the push
//! [`crate::registry::publish`]) beside the stages that run them ([`stages`]), what determines an
//! image ([`inputs`]), the settings resolved once ([`plan`]), the build itself ([`pipeline`]),
//! the seam acceptance plugs into ([`acceptance`]), and the stage lines on stderr ([`progress`]).

pub mod acceptance;
pub mod describe;
pub mod digest_manifest;
pub mod error;
pub mod go;
pub mod inputs;
pub mod patches;
pub mod pipeline;
pub mod plan;
pub mod progress;
pub mod source;
pub mod stage;
pub mod stages;
pub mod worktree;
