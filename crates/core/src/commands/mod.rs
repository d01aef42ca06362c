//! The commands beside `build`, each over the layers below: [`doctor`] (`doctor`), [`verify`] (`verify`), [`prove`]
//! (`patches prove`, `patches matrix`), [`pin`], [`upstream`], [`copy`], [`refresh`]
//! (`patches edit`, `patches export`), [`self_image`], [`signatures`] (`manifest record-signatures`), and [`report`], the text every command
//! prints.

pub mod copy;
pub mod doctor;
pub mod pin;
pub mod prove;
pub mod refresh;
pub mod report;
pub mod self_image;
pub mod signatures;
pub mod upstream;
pub mod verify;
