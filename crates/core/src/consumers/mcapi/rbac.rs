//! The OCCM chart's RBAC in a rendering (the `cloud-controller-manager.yaml` stream
//! magnum-cluster-api writes): the ServiceAccount the OCCM DaemonSet runs as, the ClusterRoles
//! bound to it, and whether they allow what the node lifecycle controller must do, delete a Node
//! whose server is gone (k8s.io/cloud-provider controllers/nodelifecycle: `unable to delete node
//! …`, event `DeletingNodeFailed`).
//!
//! Why: chart 2.36.2 (kubernetes/cloud-provider-openstack PR #3165, "reduce ClusterRole scope")
//! replaced `nodes: ['*']` with `get, list, watch, patch, update`; the lifecycle controller's
//! deletions then fail (#3225) until PR #3228 put `delete` back. [`set_node_delete`] makes that
//! repair in the text of the stream, one line, every other byte kept, and takes it out again.
//!
//! RBAC semantics (k8s.io/kubernetes plugin/pkg/auth/authorizer/rbac `RuleAllows`): a rule allows
//! a request when its `verbs`, `apiGroups` and `resources` each hold the request's value or `*`,
//! and it has no `resourceNames` (a Node's deletion names one Node, which a rule limited to other
//! names does not allow; such a rule is not counted).

use serde_norway::Value;

use super::documents;

/// The OCCM container's name in the chart's DaemonSet (`templates/daemonset.yaml:47`).
const CONTAINER_NAME: &str = "openstack-cloud-controller-manager";
/// The verb the node lifecycle controller needs on `nodes`.
pub const NODE_DELETE: &str = "delete";

/// The RBAC the OCCM DaemonSet runs with, as far as the stream says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OccmRbac {
    /// `namespace/name` of its ServiceAccount (`serviceAccountName`, else `default`).
    pub service_account: String,
    /// The ClusterRoles bound to it by ClusterRoleBindings of the stream, with whether each is
    /// in the stream too (`false`: bound, defined elsewhere, its rules unknown).
    pub cluster_roles: Vec<(String, bool)>,
    /// Whether a bound ClusterRole of the stream allows `delete` on core `nodes`.
    pub node_delete: bool,
}

impl OccmRbac {
    /// One line for messages: `ServiceAccount kube-system/cloud-controller-manager, ClusterRole
    /// system:cloud-controller-manager cannot delete nodes`.
    pub fn describe(&self) -> String {
        let roles = if self.cluster_roles.is_empty() {
            "no ClusterRole bound in the Secret".to_string()
        } else {
            let names: Vec<&str> = self.cluster_roles.iter().map(|(n, _)| n.as_str()).collect();
            format!(
                "ClusterRole {}{}",
                names.join(", "),
                if self.node_delete {
                    " can delete nodes"
                } else {
                    " cannot delete nodes"
                }
            )
        };
        format!("ServiceAccount {}, {roles}", self.service_account)
    }
}

/// What is wrong with a stream's RBAC, one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RbacError(pub String);

fn strings(v: &Value) -> Vec<&str> {
    v.as_sequence()
        .map(|s| s.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Whether one rule allows `verb` on core (`""`) `resource`.
fn rule_allows(rule: &Value, verb: &str, resource: &str) -> bool {
    let has = |field: &str, want: &str| {
        strings(&rule[field])
            .iter()
            .any(|v| *v == want || *v == "*")
    };
    has("verbs", verb)
        && has("apiGroups", "")
        && has("resources", resource)
        && strings(&rule["resourceNames"]).is_empty()
}

/// Whether the rule names core `nodes` itself (not only through `*`), the rule to edit.
fn names_nodes(rule: &Value) -> bool {
    strings(&rule["apiGroups"]).contains(&"")
        && strings(&rule["resources"]).contains(&"nodes")
        && strings(&rule["resourceNames"]).is_empty()
}

/// A document of a stream: its byte range and its value.
type Document = ((usize, usize), Value);

/// The parsed documents of `text` with their byte ranges.
fn parsed(text: &str) -> Result<Vec<Document>, RbacError> {
    documents(text)
        .into_iter()
        .map(|(start, end)| {
            serde_norway::from_str::<Value>(&text[start..end])
                .map(|v| ((start, end), v))
                .map_err(|e| {
                    RbacError(format!(
                        "the document at line {} is not YAML: {}",
                        text[..start].lines().count() + 1,
                        e.to_string().replace('\n', " ")
                    ))
                })
        })
        .collect()
}

fn name_of(v: &Value) -> &str {
    v["metadata"]["name"].as_str().unwrap_or("")
}

/// The RBAC of the OCCM DaemonSet of `text` (a multi-document YAML stream as `helm template`
/// prints it).
///
/// Errors: a document that is not YAML; no DaemonSet with an OCCM container; a bound
/// ClusterRole of the stream whose `rules` is not a list of rules.
pub fn occm_rbac(text: &str) -> Result<OccmRbac, RbacError> {
    let docs = parsed(text)?;
    let ds = docs
        .iter()
        .map(|(_, v)| v)
        .find(|v| {
            v["kind"] == "DaemonSet"
                && v["spec"]["template"]["spec"]["containers"]
                    .as_sequence()
                    .is_some_and(|cs| cs.iter().any(|c| c["name"] == CONTAINER_NAME))
        })
        .ok_or_else(|| RbacError(format!("no DaemonSet with a {CONTAINER_NAME} container")))?;
    let namespace = ds["metadata"]["namespace"].as_str().unwrap_or("default");
    let account = ds["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .unwrap_or("default");
    let bound: Vec<String> = docs
        .iter()
        .map(|(_, v)| v)
        .filter(|v| v["kind"] == "ClusterRoleBinding" && v["roleRef"]["kind"] == "ClusterRole")
        .filter(|v| {
            v["subjects"].as_sequence().is_some_and(|subjects| {
                subjects.iter().any(|s| {
                    s["kind"] == "ServiceAccount"
                        && s["name"].as_str() == Some(account)
                        && s["namespace"].as_str().unwrap_or("default") == namespace
                })
            })
        })
        .filter_map(|v| v["roleRef"]["name"].as_str().map(str::to_string))
        .collect();
    let mut cluster_roles = Vec::new();
    let mut node_delete = false;
    for name in bound {
        let role = docs
            .iter()
            .map(|(_, v)| v)
            .find(|v| v["kind"] == "ClusterRole" && name_of(v) == name);
        if let Some(role) = role {
            let rules = role["rules"].as_sequence().ok_or_else(|| {
                RbacError(format!(
                    "ClusterRole {name}: `rules` is not a list of rules"
                ))
            })?;
            node_delete |= rules.iter().any(|r| rule_allows(r, NODE_DELETE, "nodes"));
        }
        cluster_roles.push((name, role.is_some()));
    }
    Ok(OccmRbac {
        service_account: format!("{namespace}/{account}"),
        cluster_roles,
        node_delete,
    })
}

/// The stream with `delete` on nodes given (`allow`) or taken back, and what was done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeDeleteEdit {
    /// The whole stream; only the one verb changed.
    pub text: String,
    /// `ClusterRole <name>: delete added to the nodes rule` (or removed); `None` when nothing
    /// needed changing.
    pub change: Option<String>,
}

/// Gives the OCCM ServiceAccount `delete` on core `nodes` (`allow`), by adding the verb to the
/// first rule of a bound ClusterRole of the stream that names `nodes`, or takes that verb out of
/// it again (`!allow`): one list item (`- delete`, or `, "delete"` in a flow list) added or
/// removed, every other byte kept; the edited ClusterRole must parse to the original with exactly
/// that verb changed. Nothing changes when the RBAC already is as asked.
///
/// Errors: those of [`occm_rbac`]; no bound ClusterRole in the stream with a rule naming
/// `nodes`; `!allow` when delete comes from `*` or from another rule; a layout it cannot edit as
/// one line.
pub fn set_node_delete(text: &str, allow: bool) -> Result<NodeDeleteEdit, RbacError> {
    let rbac = occm_rbac(text)?;
    let unchanged = || NodeDeleteEdit {
        text: text.to_string(),
        change: None,
    };
    if rbac.node_delete == allow {
        return Ok(unchanged());
    }
    let docs = parsed(text)?;
    let Some((name, (start, end), role, index)) = nodes_rule(&rbac, &docs) else {
        return Err(RbacError(format!(
            "{}: no ClusterRole of the Secret has a rule for nodes to {} delete{}",
            rbac.describe(),
            if allow { "add" } else { "take" },
            if allow {
                " (a rule of apiGroups [\"\"] and resources [nodes] without resourceNames, in a ClusterRole bound to the DaemonSet's ServiceAccount): add the verb by hand"
            } else {
                ""
            }
        )));
    };
    let mut want = role.clone();
    let verbs = want["rules"][index]["verbs"]
        .as_sequence_mut()
        .ok_or_else(|| RbacError(format!("ClusterRole {name}: the nodes rule has no verbs")))?;
    if allow {
        verbs.push(Value::from(NODE_DELETE));
    } else {
        let before = verbs.len();
        verbs.retain(|v| v.as_str() != Some(NODE_DELETE));
        if verbs.len() == before {
            return Err(RbacError(format!(
                "ClusterRole {name}: delete on nodes does not come from a `delete` verb of its nodes rule (`*`?): take it away by hand"
            )));
        }
    }
    let doc = &text[start..end];
    let edited = edit_verbs(doc, index, allow).ok_or_else(|| {
        RbacError(format!(
            "ClusterRole {name}: the verbs of its nodes rule are not laid out as a list this edit handles (one `- verb` per line, or a flow list)"
        ))
    })?;
    let got: Value = serde_norway::from_str(&edited)
        .map_err(|e| RbacError(format!("ClusterRole {name}: the edit does not parse: {e}")))?;
    if got != want {
        return Err(RbacError(format!(
            "ClusterRole {name}: the edited text does not read as the original with delete {}",
            if allow { "added" } else { "taken out" }
        )));
    }
    let out = format!("{}{edited}{}", &text[..start], &text[end..]);
    let done = occm_rbac(&out)?;
    if done.node_delete != allow {
        return Err(RbacError(format!(
            "ClusterRole {name}: delete on nodes still {} after the edit (another rule?)",
            if allow { "not allowed" } else { "allowed" }
        )));
    }
    let also = if allow {
        also_granted(&role["rules"][index])
    } else {
        String::new()
    };
    Ok(NodeDeleteEdit {
        text: out,
        change: Some(format!(
            "ClusterRole {name}: delete {} the nodes rule{also}",
            if allow { "added to" } else { "taken out of" }
        )),
    })
}

/// The first rule naming `nodes` of a ClusterRole bound to OCCM (`rbac`'s) among `docs`: the
/// role's name, its document's span in the stream, the role, and the rule's index.
fn nodes_rule(
    rbac: &OccmRbac,
    docs: &[Document],
) -> Option<(String, (usize, usize), Value, usize)> {
    rbac.cluster_roles
        .iter()
        .filter(|(_, here)| *here)
        .find_map(|(name, _)| {
            docs.iter().find_map(|(span, v)| {
                if v["kind"] != "ClusterRole" || name_of(v) != name {
                    return None;
                }
                let i = v["rules"].as_sequence()?.iter().position(names_nodes)?;
                Some((name.clone(), *span, v.clone(), i))
            })
        })
}

/// ` (the rule also names pods, which get delete too)` when `rule` names other resources beside
/// nodes (a verb added to it is theirs too); empty otherwise.
fn also_granted(rule: &Value) -> String {
    let others: Vec<&str> = rule["resources"]
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|r| *r != "nodes")
        .collect();
    if others.is_empty() {
        return String::new();
    }
    format!(
        " (the rule also names {}, which get delete too)",
        others.join(", ")
    )
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The lines `[from, to)` of the rule `rules[index]` of the document `lines` (split inclusive of
/// their newlines): the rule items are the lines at the first item's indentation starting with
/// `- `, up to the next top-level key.
fn rule_lines(lines: &[&str], index: usize) -> Option<(usize, usize)> {
    let rules = lines
        .iter()
        .position(|l| l.trim_end() == "rules:" && indent_of(l) == 0)?;
    // The rule items: lines at the first item's indentation starting with `- `, up to the next
    // top-level key.
    let item_indent = lines[rules + 1..]
        .iter()
        .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|l| indent_of(l))?;
    let mut starts = Vec::new();
    let mut stop = lines.len();
    for (i, l) in lines.iter().enumerate().skip(rules + 1) {
        let t = l.trim_start();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if indent_of(l) < item_indent || (indent_of(l) == item_indent && !t.starts_with("- ")) {
            stop = i;
            break;
        }
        if indent_of(l) == item_indent && t.starts_with("- ") {
            starts.push(i);
        }
    }
    let from = *starts.get(index)?;
    Some((from, starts.get(index + 1).copied().unwrap_or(stop)))
}

/// The flow-list line `verbs: ["get", "list"]` with `delete` added (in the list's quoting) or
/// taken out; `None` when it is not there to take out.
fn flow_list_edited(line: &str, allow: bool) -> Option<String> {
    let close = line.rfind(']')?;
    if allow {
        let open = line.find('[')?;
        let inner = line[open + 1..close].trim();
        let quote = if inner.contains('\'') { "'" } else { "\"" };
        let sep = if inner.is_empty() { "" } else { ", " };
        return Some(format!(
            "{}{sep}{quote}{NODE_DELETE}{quote}{}",
            &line[..close],
            &line[close..]
        ));
    }
    let mut l = line.to_string();
    for form in [
        ", \"delete\"",
        ", 'delete'",
        ", delete",
        "\"delete\", ",
        "'delete', ",
        "delete, ",
        "\"delete\"",
        "'delete'",
    ] {
        if let Some(at) = l[..close].find(form) {
            l.replace_range(at..at + form.len(), "");
            return Some(l);
        }
    }
    None
}

/// The document `doc` with `delete` added to (or taken out of) the verbs of its `rules[index]`,
/// edited as text; `None` when the layout is not one it knows.
fn edit_verbs(doc: &str, index: usize, allow: bool) -> Option<String> {
    let lines: Vec<&str> = doc.split_inclusive('\n').collect();
    let (from, to) = rule_lines(&lines, index)?;
    let verbs = (from..to).find(|&i| {
        let t = lines[i].trim_start().trim_start_matches("- ");
        t.starts_with("verbs:")
    })?;
    let after_key = lines[verbs].split_once("verbs:")?.1.trim();
    let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    if after_key.starts_with('[') {
        // A flow list: `verbs: ["get", "list"]`.
        out[verbs] = flow_list_edited(lines[verbs], allow)?;
        return Some(out.concat());
    }
    if !after_key.is_empty() {
        return None;
    }
    // A block list: `- verb` lines after `verbs:`.
    let items: Vec<usize> = (verbs + 1..to)
        .take_while(|&i| lines[i].trim_start().starts_with("- "))
        .collect();
    let first = *items.first()?;
    let indent = &lines[first][..indent_of(lines[first])];
    if items.iter().any(|&i| indent_of(lines[i]) != indent.len()) {
        return None;
    }
    if allow {
        let last = *items.last()?;
        out.insert(last + 1, format!("{indent}- {NODE_DELETE}\n"));
    } else {
        let at = items.iter().copied().find(|&i| {
            let v = lines[i].trim_start()[2..].trim();
            v.trim_matches(['"', '\'']) == NODE_DELETE
        })?;
        out.remove(at);
    }
    Some(out.concat())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chart 2.35.0's RBAC and DaemonSet head, as magnum-cluster-api 0.38.2 renders it (labels
    /// trimmed).
    const CHART_2_35: &str = "---\n# Source: openstack-cloud-controller-manager/templates/serviceaccount.yaml\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: cloud-controller-manager\n  namespace: kube-system\n  annotations:\n---\n# Source: openstack-cloud-controller-manager/templates/clusterrole.yaml\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: system:cloud-controller-manager\n  annotations:\nrules:\n- apiGroups:\n  - coordination.k8s.io\n  resources:\n  - leases\n  verbs:\n  - get\n  - create\n  - update\n- apiGroups:\n  - \"\"\n  resources:\n  - nodes\n  verbs:\n  - '*'\n- apiGroups:\n  - \"\"\n  resources:\n  - nodes/status\n  verbs:\n  - patch\n---\n# Source: openstack-cloud-controller-manager/templates/clusterrolebinding.yaml\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: system:cloud-controller-manager\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: system:cloud-controller-manager\nsubjects:\n- kind: ServiceAccount\n  name: cloud-controller-manager\n  namespace: \"kube-system\"\n---\n# Source: openstack-cloud-controller-manager/templates/daemonset.yaml\napiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: openstack-cloud-controller-manager\n  namespace: kube-system\nspec:\n  template:\n    spec:\n      serviceAccountName: cloud-controller-manager\n      containers:\n        - name: openstack-cloud-controller-manager\n          image: \"registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.35.0\"\n";

    /// Chart 2.36.2's nodes rule (PR #3165).
    fn chart_2_36_2() -> String {
        CHART_2_35.replace(
            "  - nodes\n  verbs:\n  - '*'\n",
            "  - nodes\n  verbs:\n  - get\n  - list\n  - watch\n  - patch\n  - update\n",
        )
    }

    #[test]
    fn restoring_delete_on_a_rule_that_names_more_than_nodes_says_so() {
        let shared = chart_2_36_2().replace(
            "  - nodes\n  verbs:",
            "  - nodes\n  - persistentvolumes\n  verbs:",
        );
        let e = set_node_delete(&shared, true).unwrap();
        assert_eq!(
            e.change.as_deref(),
            Some(
                "ClusterRole system:cloud-controller-manager: delete added to the nodes rule (the rule also names persistentvolumes, which get delete too)"
            )
        );
        assert_eq!(set_node_delete(&e.text, false).unwrap().text, shared);
    }

    #[test]
    fn the_bound_cluster_role_decides_whether_nodes_can_be_deleted() {
        let r = occm_rbac(CHART_2_35).unwrap();
        assert_eq!(r.service_account, "kube-system/cloud-controller-manager");
        assert_eq!(
            r.cluster_roles,
            vec![("system:cloud-controller-manager".to_string(), true)]
        );
        assert!(r.node_delete);
        let r = occm_rbac(&chart_2_36_2()).unwrap();
        assert!(!r.node_delete);
        assert_eq!(
            r.describe(),
            "ServiceAccount kube-system/cloud-controller-manager, ClusterRole system:cloud-controller-manager cannot delete nodes"
        );
        // Bound to another ServiceAccount, or limited to resourceNames: not counted.
        let other = CHART_2_35.replace(
            "  name: cloud-controller-manager\n  namespace: \"kube-system\"",
            "  name: someone-else\n  namespace: \"kube-system\"",
        );
        let r = occm_rbac(&other).unwrap();
        assert!(!r.node_delete && r.cluster_roles.is_empty(), "{r:?}");
        let named = CHART_2_35.replace(
            "  - nodes\n  verbs:",
            "  - nodes\n  resourceNames:\n  - one\n  verbs:",
        );
        assert!(!occm_rbac(&named).unwrap().node_delete);
        // Unparsable rules, unparsable YAML, no DaemonSet: one line each.
        let bad = CHART_2_35.replace(
            "rules:\n- apiGroups:\n  - coordination.k8s.io",
            "rules: 7\nx:\n- apiGroups:\n  - coordination.k8s.io",
        );
        let e = occm_rbac(&bad).unwrap_err().0;
        assert_eq!(
            e,
            "ClusterRole system:cloud-controller-manager: `rules` is not a list of rules"
        );
        let e =
            occm_rbac(&CHART_2_35.replace("kind: ClusterRole\n", "kind: ClusterRole\n  : : [\n"))
                .unwrap_err()
                .0;
        assert!(e.starts_with("the document at line 10 is not YAML"), "{e}");
        assert!(occm_rbac("kind: ConfigMap\n").is_err());
    }

    #[test]
    fn delete_is_added_as_one_line_and_taken_out_again() {
        let before = chart_2_36_2();
        let e = set_node_delete(&before, true).unwrap();
        assert_eq!(
            e.change.as_deref(),
            Some("ClusterRole system:cloud-controller-manager: delete added to the nodes rule")
        );
        assert!(occm_rbac(&e.text).unwrap().node_delete);
        let diff: Vec<&str> = e
            .text
            .lines()
            .filter(|l| !before.lines().any(|b| b == *l))
            .collect();
        assert_eq!(diff, ["  - delete"]);
        assert_eq!(e.text.lines().count(), before.lines().count() + 1);
        // Taken out: the bytes before.
        let back = set_node_delete(&e.text, false).unwrap();
        assert_eq!(back.text, before);
        // Nothing to do either way.
        assert_eq!(set_node_delete(&before, false).unwrap().change, None);
        assert_eq!(set_node_delete(CHART_2_35, true).unwrap().change, None);
        // `*` cannot be taken apart.
        let e = set_node_delete(CHART_2_35, false).unwrap_err().0;
        assert!(e.contains("does not come from a `delete` verb"), "{e}");
        // A flow list.
        let flow = before.replace(
            "  verbs:\n  - get\n  - list\n  - watch\n  - patch\n  - update\n",
            "  verbs: [\"get\", \"list\", \"watch\", \"patch\", \"update\"]\n",
        );
        let e = set_node_delete(&flow, true).unwrap();
        assert!(
            e.text.contains(
                "verbs: [\"get\", \"list\", \"watch\", \"patch\", \"update\", \"delete\"]\n"
            ),
            "{}",
            e.text
        );
        assert_eq!(set_node_delete(&e.text, false).unwrap().text, flow);
        // No rule for nodes at all.
        let none = before.replace("  - nodes\n  verbs:", "  - services\n  verbs:");
        let e = set_node_delete(&none, true).unwrap_err().0;
        assert!(
            e.contains("no ClusterRole of the Secret has a rule for nodes"),
            "{e}"
        );
    }
}
