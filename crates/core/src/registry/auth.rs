//! Registry credentials behind one trait, [`Keychain`] (go-containerregistry's
//! `authn.Keychain`): a new scheme is one implementation. [`Keychains`] holds the default
//! keychain and per-host ones (`ghcr.io` from a token, everything else from the files).
//!
//! The default, [`AuthFiles`]: the files docker, podman and skopeo users already have.
//!
//! Files are searched in this order, the first that has credentials for the registry wins:
//! `--registry-config FILE` alone when given; otherwise `$REGISTRY_AUTH_FILE`,
//! `$DOCKER_CONFIG/config.json` (or `~/.docker/config.json`),
//! `$XDG_RUNTIME_DIR/containers/auth.json` and `~/.config/containers/auth.json` (podman).
//! Each file may hold `auths` (`auth` base64 `user:password`, `username`/`password`,
//! `identitytoken`), `credHelpers` (per registry) or `credsStore`; helpers are run as
//! `docker-credential-<name>` by the `docker_credential` crate. No match means anonymous.
//! Secrets never appear in errors.

use std::path::{Path, PathBuf};

use docker_credential::{CredentialRetrievalError, DockerCredential};
use oci_client::secrets::RegistryAuth;
use serde_json::Value;

/// A registry credential and where it came from (for messages; never the secret).
#[derive(Clone)]
pub struct Credential {
    /// What the client sends.
    pub auth: RegistryAuth,
    /// Where it came from: a file, a helper, a token's name.
    pub from: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("from", &self.from)
            .finish()
    }
}

/// One way of finding a registry's credential.
pub trait Keychain: Send + Sync + std::fmt::Debug {
    /// The credential for `registry` (`host[:port]`); `None` when this keychain has none (then
    /// the registry is asked anonymously).
    ///
    /// Errors: a lookup that failed (a helper that cannot run, a file that is not JSON), one
    /// line naming the registry and the source, never the secret.
    fn resolve(&self, registry: &str) -> Result<Option<Credential>, AuthError>;
}

/// The keychain a registry client uses: per-host keychains first, else the default.
#[derive(Debug, Clone)]
pub struct Keychains {
    default: std::sync::Arc<dyn Keychain>,
    hosts: Vec<(String, std::sync::Arc<dyn Keychain>)>,
}

impl Default for Keychains {
    /// The default [`AuthFiles`] (none) and no per-host keychains: anonymous everywhere.
    fn default() -> Self {
        Keychains::new(AuthFiles::default())
    }
}

impl Keychains {
    /// `default` for every registry.
    pub fn new(default: impl Keychain + 'static) -> Self {
        Keychains {
            default: std::sync::Arc::new(default),
            hosts: Vec::new(),
        }
    }

    /// `keychain` for the registry `host` (`host[:port]`, as a reference names it), instead of
    /// the default.
    pub fn with_host(mut self, host: &str, keychain: impl Keychain + 'static) -> Self {
        self.hosts
            .push((host.to_string(), std::sync::Arc::new(keychain)));
        self
    }
}

impl Keychain for Keychains {
    fn resolve(&self, registry: &str) -> Result<Option<Credential>, AuthError> {
        match self.hosts.iter().find(|(h, _)| key_matches(h, registry)) {
            Some((_, k)) => k.resolve(registry),
            None => self.default.resolve(registry),
        }
    }
}

/// Where credentials are looked for, in priority order.
#[derive(Debug, Clone, Default)]
pub struct AuthFiles {
    /// Candidate files; missing ones are skipped.
    pub files: Vec<PathBuf>,
}

/// A credential lookup failure: one line naming the registry, the file and the helper.
#[derive(Debug, Clone, thiserror::Error)]
#[error("credentials for {registry} from {file}: {message}")]
pub struct AuthError {
    /// `host[:port]`.
    pub registry: String,
    /// The file whose entry failed.
    pub file: String,
    /// The cause (never the secret).
    pub message: String,
}

/// The operation of a [`super::RegistryError`] whose message is an [`AuthError`]'s line (it names
/// the registry and the source itself, and is said as it is).
pub const LOOK_UP_CREDENTIALS: &str = "look up credentials";

impl Keychain for AuthFiles {
    fn resolve(&self, registry: &str) -> Result<Option<Credential>, AuthError> {
        Ok(match self.credential(registry)? {
            (RegistryAuth::Anonymous, _) => None,
            (auth, from) => Some(Credential {
                auth,
                from: from.map(|f| f.display().to_string()).unwrap_or_default(),
            }),
        })
    }
}

impl AuthFiles {
    /// The search list: `explicit` alone, or the standard locations from the environment.
    pub fn discover(explicit: Option<&Path>) -> Self {
        if let Some(p) = explicit {
            return AuthFiles {
                files: vec![p.to_path_buf()],
            };
        }
        let env = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let home = env("HOME");
        let mut files = Vec::new();
        files.extend(env("REGISTRY_AUTH_FILE"));
        match env("DOCKER_CONFIG") {
            Some(d) => files.push(d.join("config.json")),
            None => files.extend(home.as_ref().map(|h| h.join(".docker/config.json"))),
        }
        files.extend(env("XDG_RUNTIME_DIR").map(|d| d.join("containers/auth.json")));
        files.extend(home.map(|h| h.join(".config/containers/auth.json")));
        AuthFiles { files }
    }

    /// The credential for `registry` (`host[:port]`): the first file with an entry for it, else
    /// anonymous. Returns the file it came from, for messages.
    pub fn credential(&self, registry: &str) -> Result<(RegistryAuth, Option<PathBuf>), AuthError> {
        for file in &self.files {
            let Ok(text) = std::fs::read(file) else {
                continue;
            };
            let err = |message: String| AuthError {
                registry: registry.to_string(),
                file: file.display().to_string(),
                message,
            };
            let conf: Value =
                serde_json::from_slice(&text).map_err(|e| err(format!("not valid JSON: {e}")))?;
            let own_helper = conf["credHelpers"][registry]
                .as_str()
                .filter(|h| !h.is_empty());
            let helper =
                own_helper.or_else(|| conf["credsStore"].as_str().filter(|h| !h.is_empty()));
            let has_entry = conf["auths"]
                .as_object()
                .is_some_and(|a| a.keys().any(|k| key_matches(k, registry)));
            if helper.is_none() && !has_entry {
                continue;
            }
            if let Some(h) = helper {
                let binary = format!("docker-credential-{h}");
                if !on_path(&binary) {
                    return Err(err(format!(
                        "credential helper `{binary}` is not installed (or not on PATH)"
                    )));
                }
            }
            match docker_credential::get_credential_from_reader(text.as_slice(), registry) {
                Ok(DockerCredential::UsernamePassword(u, p)) => {
                    return Ok((RegistryAuth::Basic(u, p), Some(file.clone())));
                }
                Ok(DockerCredential::IdentityToken(t)) => {
                    return Ok((RegistryAuth::Bearer(t), Some(file.clone())));
                }
                // A store without an entry for this registry: keep looking.
                Err(CredentialRetrievalError::NoCredentialConfigured) => continue,
                Err(CredentialRetrievalError::HelperFailure {
                    helper,
                    stdout,
                    stderr,
                }) => {
                    // docker-credential-helpers' `Serve` prints its error on stdout and exits 1
                    // (`credentials not found in native keychain` when it has no entry); other
                    // helpers use stderr.
                    let said = first_line(&stdout).or_else(|| first_line(&stderr));
                    let message = match said {
                        Some(m) if m.contains("not found") => continue,
                        // A store for every registry that says nothing: no entry here.
                        None if own_helper.is_none() => continue,
                        Some(m) => format!("credential helper `{helper}` failed: {m}"),
                        None => format!("credential helper `{helper}` failed without saying why"),
                    };
                    return Err(err(message));
                }
                Err(e) => {
                    let helper = helper.map_or("the credential helper".to_string(), |h| {
                        format!("credential helper `docker-credential-{h}`")
                    });
                    return Err(err(match e {
                        CredentialRetrievalError::HelperCommunicationError => {
                            format!("{helper} could not be run or be given the registry's name")
                        }
                        CredentialRetrievalError::MalformedHelperResponse => format!(
                            "{helper} answered something else than credentials (JSON with Username and Secret)"
                        ),
                        e => e.to_string(),
                    }));
                }
            }
        }
        Ok((RegistryAuth::Anonymous, None))
    }
}

/// The first non-empty line of a helper's output, trimmed and cut to 160 characters.
fn first_line(output: &str) -> Option<String> {
    let line = output.lines().map(str::trim).find(|l| !l.is_empty())?;
    Some(match line.char_indices().nth(160) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_string(),
    })
}

/// Whether a config `auths` key (`host`, `https://host`, `https://host/v1/`) names `registry`.
fn key_matches(key: &str, registry: &str) -> bool {
    let k = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let k = k.split('/').next().unwrap_or(k);
    let norm = |r: &str| {
        if r == "index.docker.io" || r == "registry-1.docker.io" {
            "docker.io".to_string()
        } else {
            r.to_string()
        }
    };
    norm(k) == norm(registry)
}

fn on_path(binary: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(binary).is_file()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path, json: &str) -> AuthFiles {
        let p = dir.join("auth.json");
        std::fs::write(&p, json).unwrap();
        AuthFiles {
            files: vec![dir.join("missing.json"), p],
        }
    }

    #[test]
    fn basic_from_auths_and_anonymous_otherwise() {
        let d = tempfile::tempdir().unwrap();
        // "forge:s3cret"
        let f = files(
            d.path(),
            r#"{"auths":{"https://127.0.0.1:5000":{"auth":"Zm9yZ2U6czNjcmV0"}}}"#,
        );
        let (auth, from) = f.credential("127.0.0.1:5000").unwrap();
        assert!(matches!(auth, RegistryAuth::Basic(ref u, ref p) if u == "forge" && p == "s3cret"));
        assert_eq!(from.unwrap(), d.path().join("auth.json"));
        assert!(matches!(
            f.credential("other.example").unwrap().0,
            RegistryAuth::Anonymous
        ));
    }

    #[test]
    fn a_missing_helper_is_named() {
        let d = tempfile::tempdir().unwrap();
        let f = files(
            d.path(),
            r#"{"credHelpers":{"reg.example":"nosuchhelper"}}"#,
        );
        let e = f.credential("reg.example").unwrap_err().to_string();
        assert!(
            e.contains("credential helper `docker-credential-nosuchhelper` is not installed"),
            "{e}"
        );
        assert!(matches!(
            f.credential("other.example").unwrap().0,
            RegistryAuth::Anonymous
        ));
    }

    #[test]
    fn a_lookup_error_is_said_once_with_its_registry_and_file() {
        let e = AuthError {
            registry: "reg.example:5000".into(),
            file: "/home/u/.docker/config.json".into(),
            message: "credential helper `docker-credential-pass` failed: pass store is empty"
                .into(),
        };
        let line = e.to_string();
        let r = crate::registry::RegistryError {
            registry: e.registry.clone(),
            operation: LOOK_UP_CREDENTIALS.into(),
            message: line.clone(),
            kind: crate::registry::ErrorKind::Auth,
        };
        assert_eq!(r.to_string(), line);
        assert_eq!(
            line,
            "credentials for reg.example:5000 from /home/u/.docker/config.json: credential helper `docker-credential-pass` failed: pass store is empty"
        );
        // Any other operation is said with the registry and the operation first.
        let other = crate::registry::RegistryError {
            operation: "push blob sha256:ab".into(),
            ..r
        };
        assert!(
            other
                .to_string()
                .starts_with("registry reg.example:5000: push blob sha256:ab: credentials for"),
            "{other}"
        );
    }

    /// A token scheme of its own, as a new keychain would be.
    #[derive(Debug)]
    struct Token(&'static str);

    impl Keychain for Token {
        fn resolve(&self, registry: &str) -> Result<Option<Credential>, AuthError> {
            if self.0.is_empty() {
                return Err(AuthError {
                    registry: registry.into(),
                    file: "the token".into(),
                    message: "expired".into(),
                });
            }
            Ok(Some(Credential {
                auth: RegistryAuth::Bearer(self.0.into()),
                from: "the token".into(),
            }))
        }
    }

    #[test]
    fn a_host_s_own_keychain_is_used_for_that_host_and_the_files_for_the_others() {
        let d = tempfile::tempdir().unwrap();
        let auth = files(
            d.path(),
            r#"{"auths":{"r.example":{"auth":"dTpw"},"ghcr.io":{"auth":"dTpw"}}}"#,
        );
        let k = Keychains::new(auth).with_host("https://ghcr.io", Token("t0k"));
        let c = k.resolve("ghcr.io").unwrap().unwrap();
        assert!(matches!(c.auth, RegistryAuth::Bearer(ref t) if t == "t0k"));
        assert_eq!(c.from, "the token");
        let c = k.resolve("r.example").unwrap().unwrap();
        assert!(matches!(c.auth, RegistryAuth::Basic(ref u, _) if u == "u"));
        assert!(c.from.ends_with("auth.json"), "{c:?}");
        assert!(k.resolve("other.example").unwrap().is_none());
        let e = Keychains::default()
            .with_host("ghcr.io", Token(""))
            .resolve("ghcr.io")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "credentials for ghcr.io from the token: expired"
        );
    }

    #[test]
    fn keys_match_with_scheme_and_path() {
        assert!(key_matches("https://index.docker.io/v1/", "docker.io"));
        assert!(key_matches("127.0.0.1:5000", "127.0.0.1:5000"));
        assert!(!key_matches("127.0.0.1:5001", "127.0.0.1:5000"));
    }
}
