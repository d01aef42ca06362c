//! The lowest layer, used by every other: digests, atomic writes and times ([`util`]), image
//! references ([`reference`]), SIGINT/SIGTERM ([`interrupt`]) and progress on stderr
//! ([`progress`]).

pub mod interrupt;
pub mod progress;
pub mod reference;
pub mod util;
