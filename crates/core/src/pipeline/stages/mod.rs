//! The build's stages, one file each, in pipeline order (`inputs` first: is it built already?). Each stage is a struct of borrowed
//! inputs implementing [`crate::pipeline::stage::Stage`]; its `run` calls the one public entry of the
//! module that does the work (`source::checkout`, `patches::apply_series`, `go::test::run`,
//! `go::build::build`, `image::assemble`, `describe`, `sign`, `registry::publish`,
//! `record::record`) and words its stage line. `pipeline::build` lists them;
//! `patches prove` and `verify --rebuild` run the same stages through the same runner.

pub mod accept;
pub mod build;
pub mod describe;
pub mod image;
pub mod inputs;
pub mod overrides;
pub mod patches;
pub mod publish;
pub mod record;
pub mod sign;
pub mod source;
pub mod test;

pub use accept::AcceptStage;
pub use build::BuildStage;
pub use describe::{DescribeStage, Described};
pub use image::ImageStage;
pub use inputs::{Freshness, InputsStage};
pub use overrides::OverridesStage;
pub use patches::PatchStage;
pub use publish::PublishStage;
pub use record::RecordStage;
pub use sign::{SignStage, Signed};
pub use source::SourceStage;
pub use test::TestStage;
