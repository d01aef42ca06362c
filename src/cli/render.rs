//! `occm-forge render`, including `--format crs-secret` (a Secret on stdin, rewritten on stdout).

use clap::Args;
use occm_forge_core::config::Minor;
use occm_forge_core::consumers::render;
use occm_forge_core::consumers::render::crs_secret as crs;
use occm_forge_core::consumers::render::{Format, RenderOptions};
use occm_forge_core::digest_manifest;
use occm_forge_core::pipeline::Error;

use super::output::{note, print_stdout};

#[derive(Args)]
#[command(group = clap::ArgGroup::new("which").required(true).args(["k8s", "all", "image"]))]
pub struct RenderArgs {
    /// The minor to render.
    #[arg(long = "k8s", value_name = "MINOR")]
    k8s: Option<Minor>,
    /// Render every minor of the digest manifest.
    #[arg(long)]
    all: bool,
    /// What to render (crs-secret: rewrite the Secret on stdin).
    #[arg(long, value_name = "FORMAT", value_parser = format_parser())]
    format: Format,
    #[command(flatten)]
    config: super::ConfigArg,
    /// Render entries recorded without --push too.
    #[arg(long)]
    allow_unpublished: bool,
    /// The cluster's container_infra_prefix: the image must be recorded at
    /// <PREFIX>/openstack-cloud-controller-manager (magnum-tag, magnum-prefix-tag, crs-secret).
    #[arg(long, value_name = "PREFIX")]
    prefix: Option<String>,
    /// magnum-label: your magnum-cluster-api is patched to read cloud_provider_image (no release does).
    #[arg(long)]
    patched_magnum_cluster_api: bool,
    /// crs-secret: set this image reference instead of a minor's (e.g. the previous one, to revert).
    #[arg(long, value_name = "REF")]
    image: Option<String>,
    /// crs-secret: also set minReadySeconds and readiness/liveness probes on OCCM's /healthz.
    #[arg(long)]
    observable: bool,
    /// crs-secret: also set updateStrategy OnDelete, so pods are replaced as you delete them.
    #[arg(long)]
    on_delete: bool,
    /// crs-secret: write an image of a newer Kubernetes minor than the Secret runs now (only once
    /// the cluster's control plane runs that minor).
    #[arg(long)]
    allow_skew: bool,
    /// crs-secret: drop the Secret's resourceVersion too, so `kubectl replace` overwrites whatever
    /// the Secret holds by then (restoring a saved copy); by default a Secret changed since it was
    /// read is a conflict.
    #[arg(long)]
    unconditional: bool,
    /// crs-secret: restore `delete` on nodes in the chart's ClusterRole (chart 2.36.2 dropped it,
    /// so the node lifecycle controller cannot delete the Node of a gone server), or remove it
    /// again (the revert).
    #[arg(long, value_name = "ACTION")]
    node_delete: Option<NodeDelete>,
}

/// `--node-delete`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum NodeDelete {
    /// Add `delete` to the ClusterRole's nodes rule.
    Restore,
    /// Take that `delete` out again.
    Remove,
}

/// `--format`: the names of [`Format`], listed by clap in `--help` and in its errors.
fn format_parser() -> impl clap::builder::TypedValueParser<Value = Format> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(Format::names())
        .map(|s| s.parse::<Format>().expect("a listed name parses"))
}

pub fn run(args: &RenderArgs, quiet: bool) -> Result<u8, Error> {
    let crs_secret = args.format == Format::CrsSecret;
    if args.all && crs_secret {
        return Err(Error::Usage(
            "crs-secret rewrites one Secret: give --k8s MINOR or --image REF, not --all".into(),
        ));
    }
    if args.image.is_some() && !crs_secret {
        return Err(Error::Usage(
            "--image is for --format crs-secret only".into(),
        ));
    }
    if args.image.is_some() && args.prefix.is_some() {
        return Err(Error::Usage(
            "--image names the whole reference; --prefix picks a recorded mirror of a --k8s entry: give one".into(),
        ));
    }
    if !crs_secret
        && (args.observable
            || args.on_delete
            || args.allow_skew
            || args.unconditional
            || args.node_delete.is_some())
    {
        return Err(Error::Usage(
            "--observable, --on-delete, --allow-skew, --unconditional and --node-delete are for --format crs-secret only".into(),
        ));
    }
    let opts = RenderOptions {
        allow_unpublished: args.allow_unpublished,
        prefix: args.prefix.clone(),
        patched_magnum_cluster_api: args.patched_magnum_cluster_api,
    };
    let format = match args.format {
        Format::CrsSecret => return run_crs_secret(args, &opts, quiet),
        Format::Entries(format) => format,
    };
    let config = args.config.load()?;
    let manifest = digest_manifest::read_existing(&config.digest_manifest)?;
    let entries = render::select(&manifest, &config.digest_manifest, args.k8s)?;
    let out = render::render_with(format, &entries, &opts)?;
    for w in &out.warnings {
        note(quiet, &format!("warning: {w}"));
    }
    print_stdout(&out.text)?;
    Ok(0)
}

/// The image a crs-secret render writes: `--image`, or the pinned image of the minor's entry (or
/// of the newest older minor serving it); with the cluster's minor and the line saying so when an
/// older minor serves it.
fn crs_secret_image(
    args: &RenderArgs,
    opts: &RenderOptions,
) -> Result<(String, Option<Minor>, Option<String>), Error> {
    let mut cluster_minor = None;
    let mut served = None;
    let image = match (&args.image, args.k8s) {
        (Some(image), _) => image.clone(),
        (None, Some(minor)) => {
            let config = args.config.load()?;
            let manifest = digest_manifest::read_existing(&config.digest_manifest)?;
            let Some((built, entry)) = render::skew::serving(&manifest, minor) else {
                return Err(Error::Usage(format!(
                    "{}: no entry for {minor} and none of an older minor to serve it; build it (occm-forge build --k8s {minor})",
                    config.digest_manifest.display()
                )));
            };
            if built != minor {
                cluster_minor = Some(minor);
                let policy = render::skew::Skew::of(minor, built);
                served = Some(format!(
                    "{minor} has no build of its own in {}: {}",
                    config.digest_manifest.display(),
                    policy.describe(minor, built)
                ));
            }
            render::pinned_image(built, entry, opts)?
        }
        (None, None) => {
            return Err(Error::Usage(
                "crs-secret needs --k8s MINOR or --image REF".into(),
            ));
        }
    };
    Ok((image, cluster_minor, served))
}

/// `--format crs-secret`: the image of `--image`, or of the minor's entry (at `--prefix`); a
/// minor without a build of its own is served by the newest older one, as the version-skew
/// policy allows (one minor older), said on stderr.
fn run_crs_secret(args: &RenderArgs, opts: &RenderOptions, quiet: bool) -> Result<u8, Error> {
    let (image, cluster_minor, served) = crs_secret_image(args, opts)?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
        .map_err(|e| crs::CrsError(format!("stdin cannot be read: {e}")))?;
    let input = String::from_utf8(bytes).map_err(|_| {
        crs::CrsError("stdin is not text: pipe in `kubectl get secret … -o yaml`".into())
    })?;
    let image_written = image.clone();
    let out = crs::rewrite_secret(
        &input,
        &crs::RewriteOptions {
            image,
            observable: args.observable,
            on_delete: args.on_delete,
            allow_skew: args.allow_skew,
            unconditional: args.unconditional,
            cluster_minor,
            control_plane_read: false,
            node_delete: args.node_delete.map(|a| matches!(a, NodeDelete::Restore)),
        },
    )?;
    if let Some(served) = served {
        note(quiet, &served);
    }
    if let Some(change) = &out.rbac_change {
        let revert = match args.node_delete {
            Some(NodeDelete::Restore) => "remove",
            _ => "restore",
        };
        note(
            quiet,
            &format!("{change}; revert with --node-delete {revert}"),
        );
    }
    for w in &out.warnings {
        note(quiet, &format!("warning: {w}"));
    }
    let undo = if args.observable || args.on_delete {
        " (that restores the image only: keep the Secret you piped in to undo --observable/--on-delete, and write it back with `kubectl replace -f`)"
    } else {
        ""
    };
    // The way back is a minor change too when the minors differ: the skew check must not stand
    // in a revert's way.
    let allow = match crs::skew(&out.previous_image, &image_written) {
        crs::Skew::Same => "",
        _ => " --allow-skew",
    };
    note(
        quiet,
        &format!(
            "DaemonSet {} ran {}; revert with --image {}{allow}{undo}",
            out.daemonset, out.previous_image, out.previous_image
        ),
    );
    note(
        quiet,
        &format!(
            "once Cluster API applied it, the ClusterResourceSetBinding records hash {} for this Secret",
            out.hash
        ),
    );
    note(
        quiet,
        "write it with `kubectl replace -f -`, not `kubectl apply`: a client-side apply copies the whole Secret, OpenStack credentials included, into its last-applied-configuration annotation",
    );
    print_stdout(&out.secret)?;
    Ok(0)
}
