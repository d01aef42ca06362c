//! The simulated environment the scenarios run in, below them and knowing nothing of them: a real
//! control plane ([`control_plane`]: etcd and kube-apiserver built through the Go module proxy),
//! envtest's binaries used instead when their versions match ([`envtest`]),
//! the API calls made to it ([`kube`]), a simulated OpenStack ([`cloud`]), the processes they
//! run as ([`process`]), OCCM's identity as a chart grants it ([`chart`]), Cluster API's manager ([`capi`]) and its installation with the kubeadm providers and conversion
//! webhooks ([`capi_installed`]), stand-ins for an infrastructure
//! provider and kubelets ([`provider`]) and occm-forge's own Go helper modules
//! that build them ([`helper`]).

pub mod capi;
pub mod capi_installed;
pub mod chart;
pub mod cloud;
pub mod control_plane;
pub mod envtest;
pub(crate) mod helper;
pub mod kube;
pub(crate) mod process;
pub mod provider;
