//! The OCCM chart's rendering inside the Secret key: a multi-document YAML stream as `helm
//! template` prints it, edited as text so that every byte but the intended lines stays. Finds the
//! one DaemonSet running OCCM, changes its container's `image:` line, and on request adds probes,
//! `minReadySeconds` and the `OnDelete` strategy; the edited document must parse to the original
//! with exactly those changes.

use serde_norway::{Mapping, Value};

use super::{
    CONTAINER_NAME, CrsError, DEFAULT_SECURE_PORT, MIN_READY_SECONDS, RewriteOptions, fail,
    one_line,
};
use crate::consumers::mcapi::documents;
use crate::consumers::render::magnum::MCAPI_IMAGE_NAME;

/// The edited multi-document text of the key.
#[derive(Debug, Clone)]
pub struct Edited {
    /// The whole key, with only the intended lines changed or added.
    pub text: String,
    /// `namespace/name` of the OCCM DaemonSet.
    pub daemonset: String,
    /// Its image before.
    pub previous_image: String,
    /// Notes for stderr.
    pub warnings: Vec<String>,
}

/// Whether `image`'s last path segment (before tag and digest) is OCCM's.
fn is_occm_image(image: &str) -> bool {
    let name = image.split('@').next().unwrap_or(image);
    let last = name.rsplit('/').next().unwrap_or(name);
    last.split(':').next() == Some(MCAPI_IMAGE_NAME)
}

fn is_occm_container(c: &Value) -> bool {
    c["name"].as_str() == Some(CONTAINER_NAME) || c["image"].as_str().is_some_and(is_occm_image)
}

/// A parsed `image:` line: the column of the key and the byte span of the value (without quotes).
struct ImageLine {
    key_column: usize,
    value: (usize, usize),
}

fn parse_image_line(line: &str) -> Option<(ImageLine, &str)> {
    let body = line.trim_end_matches(['\n', '\r']);
    let mut col = body.len() - body.trim_start_matches(' ').len();
    if body[col..].starts_with("- ") {
        col += 2;
        col += body[col..].len() - body[col..].trim_start_matches(' ').len();
    }
    let rest = body[col..].strip_prefix("image:")?;
    let after_key = col + "image:".len();
    let lead = rest.len() - rest.trim_start_matches(' ').len();
    let vstart = after_key + lead;
    let v = &body[vstart..];
    let (s, e) = match v.chars().next()? {
        q @ ('"' | '\'') => {
            let close = v[1..].find(q)? + 1;
            let inner = &v[1..close];
            if inner.contains('\\') || (q == '\'' && v[close + 1..].starts_with('\'')) {
                return None;
            }
            (vstart + 1, vstart + close)
        }
        _ => {
            let end = v.find(" #").unwrap_or(v.len());
            (vstart, vstart + v[..end].trim_end().len())
        }
    };
    Some((
        ImageLine {
            key_column: col,
            value: (s, e),
        },
        &body[s..e],
    ))
}

/// The container's secure port and whether probes must go to 127.0.0.1 (host network, loopback
/// bind) or may use the pod IP; refuses a bind address a probe cannot reach.
fn probe_target(container: &Value, host_network: bool) -> Result<(u16, bool), CrsError> {
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .into_iter()
        .flatten()
        .chain(container["command"].as_sequence().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    let flag = |name: &str| -> Option<&str> {
        args.iter().enumerate().find_map(|(i, a)| {
            a.strip_prefix(name).and_then(|rest| {
                rest.strip_prefix('=')
                    .or_else(|| rest.is_empty().then(|| args.get(i + 1).copied()).flatten())
            })
        })
    };
    let port =
        match flag("--secure-port") {
            Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
                CrsError(format!("--secure-port={p} serves no /healthz to probe"))
            })?,
            None => DEFAULT_SECURE_PORT,
        };
    let bind = flag("--bind-address").unwrap_or("0.0.0.0");
    let any = matches!(bind, "0.0.0.0" | "::" | "");
    let loopback = matches!(bind, "127.0.0.1" | "::1" | "localhost");
    match (host_network, any, loopback) {
        (true, true, _) | (true, _, true) => Ok((port, true)),
        (false, true, _) => Ok((port, false)),
        _ => fail(format!(
            "OCCM binds {bind}{}; a probe cannot reach /healthz there, leave --observable out",
            if host_network {
                ""
            } else {
                " without the host network"
            }
        )),
    }
}

fn probe_lines(indent: &str, key: &str, port: u16, loopback: bool, liveness: bool) -> String {
    let mut s = format!("{indent}{key}:\n{indent}  httpGet:\n");
    if loopback {
        s.push_str(&format!("{indent}    host: 127.0.0.1\n"));
    }
    s.push_str(&format!(
        "{indent}    path: /healthz\n{indent}    port: {port}\n{indent}    scheme: HTTPS\n"
    ));
    if liveness {
        s.push_str(&format!(
            "{indent}  initialDelaySeconds: 10\n{indent}  periodSeconds: 10\n{indent}  timeoutSeconds: 15\n{indent}  failureThreshold: 8\n"
        ));
    } else {
        s.push_str(&format!(
            "{indent}  periodSeconds: 10\n{indent}  timeoutSeconds: 15\n{indent}  failureThreshold: 3\n"
        ));
    }
    s
}

fn probe_value(port: u16, loopback: bool, liveness: bool) -> Value {
    serde_norway::from_str(&probe_lines("", "p", port, loopback, liveness))
        .map(|v: Value| v["p"].clone())
        .expect("probe YAML parses")
}

/// Sets the image of the one OCCM DaemonSet in `text` (a multi-document YAML stream as `helm
/// template` prints it) by editing its `image:` line, plus the optional rollout settings of
/// `opts`; every other byte stays. The result is parsed again and must equal the original with
/// exactly these changes, or nothing is returned.
pub fn set_occm_image(text: &str, opts: &RewriteOptions) -> Result<Edited, CrsError> {
    if let Err(e) = opts.image.parse::<crate::base::reference::ImageRef>() {
        return fail(format!("--image {e}"));
    }
    let target = find_occm_daemonset(text)?;
    let previous = target.image()?;
    let (start, end) = target.span;
    let mut edit = DocumentEdit::new(&target, &text[start..end]);
    let image_line = edit.set_image(&previous, &opts.image)?;
    let mut warnings = Vec::new();
    if !opts.image.contains("@sha256:") {
        warnings.push(format!(
            "{} is not pinned by digest: the nodes pull whatever its tag serves",
            opts.image
        ));
    }
    if opts.observable {
        edit.add_probes(&image_line, &mut warnings)?;
        edit.set_min_ready_seconds()?;
    }
    if opts.on_delete {
        edit.set_on_delete()?;
    }
    let new_doc = edit.into_checked_text()?;
    Ok(Edited {
        text: format!("{}{new_doc}{}", &text[..start], &text[end..]),
        daemonset: target.name,
        previous_image: previous,
        warnings,
    })
}

/// The image of the one OCCM DaemonSet's OCCM container in `text`.
///
/// Errors: [`CrsError`] without exactly one OCCM DaemonSet (as [`set_occm_image`]).
pub fn occm_image(text: &str) -> Result<String, CrsError> {
    find_occm_daemonset(text)?.image()
}

/// A DaemonSet document of the stream with at least one OCCM container.
struct Candidate {
    /// Byte range of the document in the stream.
    span: (usize, usize),
    /// The document as parsed.
    value: Value,
    /// Indexes of its OCCM containers in `spec.template.spec.containers`.
    occm: Vec<usize>,
}

/// Every DaemonSet document of `text` running OCCM ([`is_occm_container`]); fails on a document
/// that is not YAML, naming its first line.
fn occm_daemonsets(text: &str) -> Result<Vec<Candidate>, CrsError> {
    let mut found = Vec::new();
    for (start, end) in documents(text) {
        let doc = &text[start..end];
        let value: Value = match serde_norway::from_str(doc) {
            Ok(v) => v,
            Err(e) => {
                let line = text[..start].lines().count() + 1;
                return fail(format!(
                    "the document at line {line} is not YAML: {}",
                    one_line(&e.to_string())
                ));
            }
        };
        if value["kind"].as_str() != Some("DaemonSet") {
            continue;
        }
        let containers = value["spec"]["template"]["spec"]["containers"]
            .as_sequence()
            .cloned()
            .unwrap_or_default();
        let occm: Vec<usize> = containers
            .iter()
            .enumerate()
            .filter(|(_, c)| is_occm_container(c))
            .map(|(i, _)| i)
            .collect();
        if !occm.is_empty() {
            found.push(Candidate {
                span: (start, end),
                value,
                occm,
            });
        }
    }
    Ok(found)
}

/// `namespace/name` of a Kubernetes object (`default` and `<unnamed>` where missing).
fn object_name(v: &Value) -> String {
    format!(
        "{}/{}",
        v["metadata"]["namespace"].as_str().unwrap_or("default"),
        v["metadata"]["name"].as_str().unwrap_or("<unnamed>")
    )
}

/// The one DaemonSet that runs OCCM, with its one OCCM container.
struct OccmDaemonSet {
    /// Byte range of its document in the stream.
    span: (usize, usize),
    /// The document as parsed.
    value: Value,
    /// Index of the OCCM container in `spec.template.spec.containers`.
    container: usize,
    /// `namespace/name`.
    name: String,
}

impl OccmDaemonSet {
    /// The pod template's `spec`.
    fn pod_spec(&self) -> &Value {
        &self.value["spec"]["template"]["spec"]
    }

    /// The OCCM container.
    fn container(&self) -> &Value {
        &self.pod_spec()["containers"][self.container]
    }

    /// The OCCM container's current image.
    fn image(&self) -> Result<String, CrsError> {
        Ok(self.container()["image"]
            .as_str()
            .ok_or_else(|| {
                CrsError(format!(
                    "DaemonSet {}: its OCCM container has no image",
                    self.name
                ))
            })?
            .to_string())
    }
}

/// The one DaemonSet of `text` running OCCM; refuses none, several, or one with several OCCM
/// containers.
fn find_occm_daemonset(text: &str) -> Result<OccmDaemonSet, CrsError> {
    let mut found = occm_daemonsets(text)?;
    let one = match found.len() {
        1 => found.pop().expect("one"),
        0 => {
            return fail(format!(
                "no OCCM DaemonSet (none has a container named {CONTAINER_NAME} or running an …/{MCAPI_IMAGE_NAME} image)"
            ));
        }
        n => {
            return fail(format!(
                "{n} OCCM DaemonSets ({}); expected exactly one",
                found
                    .iter()
                    .map(|f| object_name(&f.value))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    };
    let name = object_name(&one.value);
    if one.occm.len() > 1 {
        return fail(format!(
            "DaemonSet {name} has {} OCCM containers; expected exactly one",
            one.occm.len()
        ));
    }
    Ok(OccmDaemonSet {
        span: one.span,
        value: one.value,
        container: one.occm[0],
        name,
    })
}

/// Where the OCCM container's `image:` line is in the document.
struct ImageLineAt {
    /// Index into [`DocumentEdit::lines`].
    index: usize,
    /// Column of the `image` key: the indentation of the container's other keys.
    key_column: usize,
}

/// The OCCM DaemonSet's document, edited line by line, and the value the edited text must parse
/// to: the original with the same changes made to the parsed value.
struct DocumentEdit<'a> {
    /// The DaemonSet whose document this is.
    target: &'a OccmDaemonSet,
    /// The document's lines, each with its line ending (an inserted entry may hold several lines).
    lines: Vec<String>,
    /// The parsed original with every intended change.
    expected: Value,
}

impl<'a> DocumentEdit<'a> {
    /// Starts from `doc`, the text of `target`'s document, unchanged.
    fn new(target: &'a OccmDaemonSet, doc: &str) -> Self {
        DocumentEdit {
            target,
            lines: doc.split_inclusive('\n').map(str::to_string).collect(),
            expected: target.value.clone(),
        }
    }

    /// Sets `key` of the OCCM container in [`Self::expected`].
    fn expect_container_key(&mut self, key: &str, value: Value) {
        let ci = self.target.container;
        set(
            &mut self.expected,
            &["spec", "template", "spec", "containers"],
            |c| {
                c.as_sequence_mut().expect("containers")[ci]
                    .as_mapping_mut()
                    .expect("container")
                    .insert(key.into(), value);
            },
        );
    }

    /// Replaces the value of the one line `image: <previous>` with `image`, keeping its quotes.
    /// Refuses when no line or several lines carry `previous`.
    fn set_image(&mut self, previous: &str, image: &str) -> Result<ImageLineAt, CrsError> {
        let matches: Vec<usize> = self
            .lines
            .iter()
            .enumerate()
            .filter(|(_, l)| parse_image_line(l).is_some_and(|(_, v)| v == previous))
            .map(|(i, _)| i)
            .collect();
        if matches.len() != 1 {
            return fail(format!(
                "DaemonSet {}: {} lines carry image {previous}; cannot tell which to change",
                self.target.name,
                matches.len()
            ));
        }
        let at = matches[0];
        let (image_line, _) = parse_image_line(&self.lines[at]).expect("matched above");
        let (s, e) = image_line.value;
        let line = &self.lines[at];
        self.lines[at] = format!("{}{image}{}", &line[..s], &line[e..]);
        self.expect_container_key("image", Value::String(image.to_string()));
        Ok(ImageLineAt {
            index: at,
            key_column: image_line.key_column,
        })
    }

    /// Adds liveness and readiness probes on `/healthz` to the OCCM container, right after its
    /// `image:` line; a probe the container already has stays, with a warning.
    fn add_probes(
        &mut self,
        image_line: &ImageLineAt,
        warnings: &mut Vec<String>,
    ) -> Result<(), CrsError> {
        let daemonset = &self.target.name;
        let container = self.target.container();
        let host_network = self.target.pod_spec()["hostNetwork"]
            .as_bool()
            .unwrap_or(false);
        let (port, loopback) = probe_target(container, host_network)
            .map_err(|e| CrsError(format!("DaemonSet {daemonset}: {}", e.0)))?;
        let indent = " ".repeat(image_line.key_column);
        let mut insert = String::new();
        for (key, liveness) in [("livenessProbe", true), ("readinessProbe", false)] {
            if container.get(key).is_some() {
                warnings.push(format!("DaemonSet {daemonset} keeps its own {key}"));
                continue;
            }
            insert.push_str(&probe_lines(&indent, key, port, loopback, liveness));
            self.expect_container_key(key, probe_value(port, loopback, liveness));
        }
        let at = image_line.index;
        if !self.lines[at].ends_with('\n') {
            self.lines[at].push('\n');
        }
        self.lines.insert(at + 1, insert);
        Ok(())
    }

    /// The index of the document's top-level `spec:` line and the indentation of its children.
    fn spec_line(&self) -> Result<(usize, String), CrsError> {
        let spec_line = top_level_key(&self.lines, "spec").ok_or_else(|| {
            CrsError(format!(
                "DaemonSet {}: no top-level `spec:` line",
                self.target.name
            ))
        })?;
        Ok((spec_line, child_indent(&self.lines, spec_line)))
    }

    /// Sets `spec.minReadySeconds` to [`MIN_READY_SECONDS`], replacing the line if there is one.
    fn set_min_ready_seconds(&mut self) -> Result<(), CrsError> {
        let (spec_line, child) = self.spec_line()?;
        let line = format!("{child}minReadySeconds: {MIN_READY_SECONDS}\n");
        match find_child(&self.lines, spec_line, &child, "minReadySeconds") {
            Some(i) => self.lines[i] = line,
            None => self.lines.insert(spec_line + 1, line),
        }
        set(&mut self.expected, &["spec"], |s| {
            s.as_mapping_mut()
                .expect("spec")
                .insert("minReadySeconds".into(), Value::from(MIN_READY_SECONDS));
        });
        Ok(())
    }

    /// Sets `spec.updateStrategy.type` to `OnDelete`; refuses a `rollingUpdate` block, which
    /// would be left behind for a strategy that has none.
    fn set_on_delete(&mut self) -> Result<(), CrsError> {
        if self.target.value["spec"]["updateStrategy"]
            .get("rollingUpdate")
            .is_some()
        {
            return fail(format!(
                "DaemonSet {} has an updateStrategy.rollingUpdate block; leave --on-delete out",
                self.target.name
            ));
        }
        let (spec_line, child) = self.spec_line()?;
        let lines = &mut self.lines;
        match find_child(lines, spec_line, &child, "updateStrategy") {
            Some(u) => {
                let grand = child_indent(lines, u);
                match find_child(lines, u, &grand, "type") {
                    Some(t) => lines[t] = format!("{grand}type: OnDelete\n"),
                    None => lines.insert(u + 1, format!("{grand}type: OnDelete\n")),
                }
            }
            None => lines.insert(
                spec_line + 1,
                format!("{child}updateStrategy:\n{child}  type: OnDelete\n"),
            ),
        }
        set(&mut self.expected, &["spec"], |s| {
            let m = s.as_mapping_mut().expect("spec");
            let mut u = Mapping::new();
            u.insert("type".into(), "OnDelete".into());
            m.insert("updateStrategy".into(), Value::Mapping(u));
        });
        Ok(())
    }

    /// The edited document, after checking that it parses to exactly [`Self::expected`].
    fn into_checked_text(self) -> Result<String, CrsError> {
        let daemonset = &self.target.name;
        let new_doc: String = self.lines.concat();
        let reparsed: Value = serde_norway::from_str(&new_doc).map_err(|e| {
            CrsError(format!(
                "DaemonSet {daemonset}: the edited document does not parse ({}); nothing written",
                one_line(&e.to_string())
            ))
        })?;
        if reparsed != self.expected {
            return fail(format!(
                "DaemonSet {daemonset}: the edited document does not read back as intended; nothing written"
            ));
        }
        Ok(new_doc)
    }
}

/// Applies `f` to the value at `path` (which exists: it was read from the same document).
fn set(v: &mut Value, path: &[&str], f: impl FnOnce(&mut Value)) {
    let mut cur = v;
    for k in path {
        cur = cur
            .as_mapping_mut()
            .and_then(|m| m.get_mut(*k))
            .expect("path exists");
    }
    f(cur)
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

fn is_content(line: &str) -> bool {
    let t = line.trim();
    !t.is_empty() && !t.starts_with('#')
}

/// The index of the line `<key>:` at column 0.
fn top_level_key(lines: &[String], key: &str) -> Option<usize> {
    lines.iter().position(|l| l.trim_end() == format!("{key}:"))
}

/// The indentation of the first content line after `parent`.
fn child_indent(lines: &[String], parent: usize) -> String {
    let base = indent_of(&lines[parent]);
    let n = lines[parent + 1..]
        .iter()
        .find(|l| is_content(l))
        .map(|l| indent_of(l))
        .filter(|n| *n > base)
        .unwrap_or(base + 2);
    " ".repeat(n)
}

/// The line `<indent><key>:` inside the block that starts after `parent`.
fn find_child(lines: &[String], parent: usize, indent: &str, key: &str) -> Option<usize> {
    let base = indent_of(&lines[parent]);
    for (i, l) in lines.iter().enumerate().skip(parent + 1) {
        if !is_content(l) {
            continue;
        }
        if indent_of(l) <= base {
            return None;
        }
        if l.strip_prefix(indent)
            .and_then(|r| r.strip_prefix(key))
            .is_some_and(|r| r.starts_with(':'))
        {
            return Some(i);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = "---\n# Source: occm/templates/sa.yaml\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: cloud-controller-manager\n  namespace: kube-system\n---\n# Source: occm/templates/daemonset.yaml\napiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: openstack-cloud-controller-manager\n  namespace: kube-system\nspec:\n  selector:\n    matchLabels:\n      app: occm\n  updateStrategy:\n    type: RollingUpdate\n  template:\n    spec:\n      containers:\n        - name: openstack-cloud-controller-manager\n          image: \"registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.34.1\"\n          args:\n            - /bin/openstack-cloud-controller-manager\n            - --bind-address=127.0.0.1\n      hostNetwork: true\n";

    fn opts(image: &str) -> RewriteOptions {
        RewriteOptions {
            image: image.into(),
            ..RewriteOptions::default()
        }
    }

    #[test]
    fn one_line_changes_and_a_revert_restores_the_bytes() {
        let new = format!(
            "r.example/occm/openstack-cloud-controller-manager:v1.34.1-occmforge.1@sha256:{}",
            "a".repeat(64)
        );
        let e = set_occm_image(STREAM, &opts(&new)).unwrap();
        let changed: Vec<_> = STREAM
            .lines()
            .zip(e.text.lines())
            .filter(|(a, b)| a != b)
            .collect();
        assert_eq!(changed.len(), 1, "{}", e.text);
        assert_eq!(changed[0].1, format!("          image: \"{new}\""));
        assert_eq!(
            e.daemonset,
            "kube-system/openstack-cloud-controller-manager"
        );
        let back = set_occm_image(&e.text, &opts(&e.previous_image)).unwrap();
        assert_eq!(back.text, STREAM);
    }

    #[test]
    fn observable_and_on_delete_add_exactly_what_they_say_and_are_idempotent() {
        let o = RewriteOptions {
            image: "x.example/openstack-cloud-controller-manager:v1@sha256:".to_string()
                + &"b".repeat(64),
            observable: true,
            on_delete: true,
            ..RewriteOptions::default()
        };
        let e = set_occm_image(STREAM, &o).unwrap();
        let v: Value = serde_norway::from_str(
            documents(&e.text)
                .iter()
                .map(|(s, t)| &e.text[*s..*t])
                .nth(2)
                .unwrap(),
        )
        .unwrap();
        assert_eq!(v["spec"]["minReadySeconds"], Value::from(60));
        assert_eq!(v["spec"]["updateStrategy"]["type"], "OnDelete");
        let c = &v["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["livenessProbe"]["httpGet"]["scheme"], "HTTPS");
        assert_eq!(c["readinessProbe"]["httpGet"]["port"], Value::from(10258));
        assert_eq!(c["readinessProbe"]["httpGet"]["host"], "127.0.0.1");
        let again = set_occm_image(&e.text, &o).unwrap();
        assert_eq!(again.text, e.text);
        assert_eq!(again.warnings.len(), 2, "{:?}", again.warnings);
    }

    #[test]
    fn refuses_without_exactly_one_occm_daemonset() {
        let none = STREAM.replace("openstack-cloud-controller-manager", "cinder-csi-plugin");
        let e = set_occm_image(&none, &opts("a/b:c"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no OCCM DaemonSet"), "{e}");
        let two = format!(
            "{STREAM}---\n{}",
            &STREAM[STREAM
                .find("# Source: occm/templates/daemonset.yaml")
                .unwrap()..]
                .replace(
                    "name: openstack-cloud-controller-manager\n  namespace",
                    "name: occm-2\n  namespace"
                )
        );
        let e = set_occm_image(&two, &opts("a/b:c"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("2 OCCM DaemonSets (kube-system/openstack-cloud-controller-manager, kube-system/occm-2)"), "{e}");
    }
}
