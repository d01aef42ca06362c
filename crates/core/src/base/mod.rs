//! The lowest layer, used by every other: digests, atomic writes and times ([`util`]), image
//! references ([`reference`]), git without the user's configuration ([`git`]), the file system under a path ([`disk`]), Go releases ([`go_release`]), an HTTP client's error chain said
//! plainly ([`client_error`]), SIGINT/SIGTERM ([`interrupt`]).

pub mod client_error;
pub mod disk;
pub mod git;
pub mod go_release;
pub mod interrupt;
pub mod reference;
pub mod util;
