//! The `inputs` stage: is this minor already built? When the inputs fingerprint equals the
//! recorded entry's, the entry's own fields still hash to that fingerprint (a hand-edited entry
//! is rebuilt: `Entry::edited`), and the result is still there — with `--push`, the registry serves the
//! recorded digest under the tag (one HEAD); without, the OCI layout holds the tag and its
//! blobs — the build is a no-op: nothing runs, nothing is written. Otherwise its line says why
//! it rebuilds.

use async_trait::async_trait;

use crate::base::util::{display_rel, short};
use crate::digest_manifest::{self, Entry};
use crate::image::layout;
use crate::pipeline::Error;
use crate::pipeline::plan::BuildPlan;
use crate::pipeline::stage::{Done, Stage, StageContext};
use crate::registry::Registry;

/// Whether the minor has to be built.
#[derive(Debug, Clone)]
pub enum Freshness {
    /// Built and still there: the recorded entry.
    UpToDate(Box<Entry>),
    /// To be built, and why.
    Stale(String),
}

/// Compares `plan`'s inputs with the recorded entry and checks the result is still there.
pub struct InputsStage<'a> {
    /// The build plan.
    pub plan: &'a BuildPlan,
    /// Asked whether the tag still serves the recorded digest (with `--push`).
    pub registry: &'a dyn Registry,
    /// With `--accept`, the scenarios the acceptance runs ([`crate::pipeline::acceptance::Acceptance::scenarios`]):
    /// an entry recorded as accepted without one of them is rebuilt.
    pub scenarios: &'a [String],
}

#[async_trait]
impl Stage for InputsStage<'_> {
    type Output = Freshness;

    fn name(&self) -> &'static str {
        "inputs"
    }

    fn blocking(&self) -> bool {
        false
    }

    async fn run(self, _: &StageContext<'_>) -> Result<Done<Freshness>, Error> {
        let freshness = freshness(self.plan, self.registry, self.scenarios).await?;
        let detail = match &freshness {
            Freshness::UpToDate(e) => format!(
                "{} is up to date: {}",
                self.plan.minor,
                up_to_date_reason(self.plan, e)
            ),
            Freshness::Stale(why) => format!("{} needs a build: {why}", self.plan.minor),
        };
        Ok(Done::new(freshness, detail))
    }
}

/// The decision; see the module documentation.
async fn freshness(
    plan: &BuildPlan,
    registry: &dyn Registry,
    scenarios: &[String],
) -> Result<Freshness, Error> {
    let stale = |why: String| Ok(Freshness::Stale(why));
    let Some(inputs) = plan.inputs() else {
        return stale(format!(
            "the base {} has no digest, so its content is unknown",
            plan.base_text
        ));
    };
    if plan.force {
        return stale("--force".into());
    }
    let manifest = digest_manifest::read(&plan.digest_manifest)?;
    let at = display_rel(&plan.digest_manifest);
    let Some(entry) = manifest.images.get(&plan.minor) else {
        return stale(format!("{at} has no entry for {}", plan.minor));
    };
    if let Some(why) = acceptance_or_signature_lacking(plan, entry, scenarios, &at) {
        return stale(why);
    }
    let Some(recorded) = &entry.inputs else {
        return stale(format!(
            "{at} records no inputs for {} (an older occm-forge built it)",
            plan.minor
        ));
    };
    if let Some(edit) = entry.edited() {
        return stale(format!("{at} entry for {} was edited: {edit}", plan.minor));
    }
    let changes = inputs.changes_since(recorded);
    if !changes.is_empty() {
        return stale(format!("inputs changed since {at}: {}", changes.join("; ")));
    }
    if let Some(why) = result_gone(plan, registry, entry, &at).await? {
        return stale(why);
    }
    Ok(Freshness::UpToDate(Box::new(entry.clone())))
}

/// Why `entry` does not satisfy `plan`'s `--accept` (not accepted, or without some of
/// `scenarios`) or `--sign-key` (unsigned, or by another signer); `at` names the digest
/// manifest. `None` when it does.
fn acceptance_or_signature_lacking(
    plan: &BuildPlan,
    entry: &Entry,
    scenarios: &[String],
    at: &str,
) -> Option<String> {
    if plan.accept && !entry.accepted {
        return Some(format!(
            "{at} records {} without acceptance, and --accept asks for it",
            plan.minor
        ));
    }
    let missing: Vec<String> = scenarios
        .iter()
        .filter(|s| !entry.accepted_scenarios.contains(s))
        .cloned()
        .collect();
    if plan.accept && !missing.is_empty() {
        return Some(format!(
            "{at} records {} accepted without {}, and --accept runs them",
            plan.minor,
            missing.join(" ")
        ));
    }
    let key = plan.sign_key.as_ref()?;
    if entry.signature.as_ref().and_then(|s| s.key.as_deref()) == Some(key.fingerprint().as_str()) {
        return None;
    }
    Some(format!(
        "{at} records {} {}, and --sign-key signs with key {}",
        plan.minor,
        match &entry.signature {
            Some(s) => match s.signer() {
                Ok(signer) => format!("signed by {signer}"),
                Err(_) => "signed".to_string(),
            },
            None => "unsigned".to_string(),
        },
        key.fingerprint()
    ))
}

/// Why the recorded result is no longer there: with `--push`, the entry was not pushed or the
/// registry's tag serves another digest; without, the layout in `--output` lacks it. `None`
/// when it is there.
///
/// Errors: [`Error::Inputs`] when the registry cannot be asked.
async fn result_gone(
    plan: &BuildPlan,
    registry: &dyn Registry,
    entry: &Entry,
    at: &str,
) -> Result<Option<String>, Error> {
    if !plan.push {
        return Ok(layout::holds(&plan.output, &entry.tag, &entry.digest).err());
    }
    if !entry.published {
        return Ok(Some(format!("{at} records it without --push")));
    }
    let served = registry
        .manifest_digest(&plan.repository_name, &entry.tag)
        .await
        .map_err(Error::Inputs)?;
    if served.as_deref() == Some(entry.digest.as_str()) {
        return Ok(None);
    }
    Ok(Some(format!(
        "{}:{} serves {}, not the recorded {}",
        plan.repository,
        entry.tag,
        served.as_deref().map_or("nothing", short),
        short(&entry.digest)
    )))
}

/// How the up-to-date verdict was reached, for the stage line.
fn up_to_date_reason(plan: &BuildPlan, e: &Entry) -> String {
    let fingerprint = e
        .inputs
        .as_ref()
        .map_or(String::new(), |i| short(&i.fingerprint).to_string());
    let there = if plan.push {
        format!("{}:{} serves {}", plan.repository, e.tag, short(&e.digest))
    } else {
        format!(
            "{} holds {} ({})",
            plan.output.display(),
            e.tag,
            short(&e.digest)
        )
    };
    format!(
        "inputs {fingerprint} match {}; {there}",
        display_rel(&plan.digest_manifest)
    )
}
