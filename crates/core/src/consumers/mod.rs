//! What consumes the digest manifest: magnum-cluster-api's vocabulary ([`mcapi`]: its rule for
//! the OCCM image, its renderer, what it writes on a management cluster), and over it the
//! formats `render` writes ([`render`]) and the clusters `clusters` reads and fixes
//! ([`clusters`]).

pub mod clusters;
pub mod mcapi;
pub mod render;
