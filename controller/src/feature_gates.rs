//! `--feature-gates`: OpenKruise's gate names, parsed into the planner's options and the
//! runtime's switches.
//!
//! Format: `Name=true,Other=false` (a bare `Name` means true), as the reference's
//! `--feature-gates`. Every gate name of the reference is accepted ([`REFERENCE_GATES`]),
//! so that a manager configuration written for OpenKruise (its kustomize manifests run
//! with `AllAlpha=true,AllBeta=true`, its chart with `ImagePullJobGate=true`) starts
//! this controller too. A gate that does not concern this controller is accepted and
//! reported once in [`FeatureGates::notes`]; a name that is no gate of the reference is
//! still an error, so that a typo does not silently leave a gate off.
//!
//! `AllAlpha` / `AllBeta` set every alpha / beta gate that is not named explicitly in the
//! same string (whatever the order), like Kubernetes' feature gates. Dependencies of the
//! reference (`SetDefaultFeatureGates`) that touch what this controller does: with
//! `KruiseDaemon` off, image pre-download is off.

use crate::plan::PlanOptions;

/// A gate string that cannot be honoured.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GateError {
    #[error("feature gate {name}: {value:?} is not true/false")]
    NotABool { name: String, value: String },
    #[error("unknown feature gate {0} (not a gate of OpenKruise)")]
    Unknown(String),
}

/// The maturity of a gate in the reference, which `AllAlpha` / `AllBeta` select by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Alpha,
    Beta,
    /// Named by the reference's sources, but its spec is not in the snapshot of
    /// `pkg/features/kruise_features.go` this table was made from; `AllAlpha` / `AllBeta`
    /// leave it alone.
    Unknown,
}

/// What this controller does with a gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    /// Switches behaviour of this controller.
    Implemented,
    /// What the gate turns on is always on here; `false` is reported and ignored.
    AlwaysOn,
    /// Concerns a part of OpenKruise that inplace does not have (another workload, a
    /// webhook, the node daemon's own settings); accepted and ignored.
    Ignored,
}

/// One gate of the reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gate {
    pub name: &'static str,
    pub stage: Stage,
    /// The reference's default.
    pub default: bool,
    pub support: Support,
    /// For gates not implemented: why; for the others: what they switch.
    pub note: &'static str,
}

const fn gate(
    name: &'static str,
    stage: Stage,
    default: bool,
    support: Support,
    note: &'static str,
) -> Gate {
    Gate {
        name,
        stage,
        default,
        support,
        note,
    }
}

use Stage::{Alpha, Beta};
use Support::{AlwaysOn, Ignored, Implemented};

const OTHER_WORKLOAD: &str =
    "concerns an OpenKruise workload or feature that inplace does not provide";
const WEBHOOK: &str = "concerns OpenKruise's admission webhooks; inplace has none";

/// Every gate of the reference (`pkg/features/kruise_features.go`; stages and defaults of
/// OpenKruise's master after v1.9.0, e.g. `ResourcesDeletionProtection` beta and off).
pub const REFERENCE_GATES: &[Gate] = &[
    gate(
        "CloneSetShortHash",
        Alpha,
        false,
        Implemented,
        "the controller-revision-hash label holds only the hash",
    ),
    gate(
        "CloneSetPartitionRollback",
        Alpha,
        false,
        Implemented,
        "raising the partition rolls updated pods back",
    ),
    gate(
        "InPlaceWorkloadVerticalScaling",
        Alpha,
        false,
        Implemented,
        "cpu/memory changes go in place",
    ),
    gate(
        "RecreatePodWhenChangeVCTInCloneSetGate",
        Alpha,
        false,
        Implemented,
        "a changed volumeClaimTemplate recreates pods",
    ),
    gate(
        "PreDownloadImageForInPlaceUpdate",
        Alpha,
        false,
        Implemented,
        "image pre-download through ImagePullJobs",
    ),
    gate(
        "CloneSetEventHandlerOptimization",
        Alpha,
        false,
        Implemented,
        "pod updates that change nothing the CloneSet decides on trigger no reconcile",
    ),
    gate(
        "PreparingUpdateAsUpdate",
        Alpha,
        false,
        Implemented,
        "when scaling, PreparingUpdate pods count as updated",
    ),
    gate(
        "ResourcesDeletionProtection",
        Beta,
        false,
        Implemented,
        "policy.kruise.io/delete-protection on CloneSets is kept by a finalizer",
    ),
    gate(
        "KruiseDaemon",
        Beta,
        true,
        Implemented,
        "off: image pre-download is off (the daemon is deployed separately)",
    ),
    gate(
        "InPlaceUpdateEnvFromMetadata",
        Beta,
        true,
        AlwaysOn,
        "env read from labels/annotations is always updated in place",
    ),
    gate(
        "ImagePullJobGate",
        Alpha,
        false,
        Ignored,
        "the ImagePullJob controller runs unless --imagepulljob-controller=false",
    ),
    gate(
        "DaemonWatchingPod",
        Beta,
        true,
        Ignored,
        "the node daemon always watches its node's pods",
    ),
    gate("PodWebhook", Beta, true, Ignored, WEBHOOK),
    gate(
        "KruisePodReadinessGate",
        Alpha,
        false,
        Ignored,
        "pods of a CloneSet always get the KruisePodReady gate; other pods are not ours",
    ),
    gate(
        "TemplateNoDefaults",
        Alpha,
        false,
        Ignored,
        "inplace never writes pod-template defaults (see Defaults)",
    ),
    gate(
        "ForceDeleteTimeoutExpectationGate",
        Alpha,
        false,
        Ignored,
        "expectations always expire after --expectation-timeout",
    ),
    gate(
        "PodUnavailableBudgetDeleteGate",
        Beta,
        true,
        Ignored,
        OTHER_WORKLOAD,
    ),
    gate(
        "PodUnavailableBudgetUpdateGate",
        Alpha,
        false,
        Ignored,
        OTHER_WORKLOAD,
    ),
    gate("WorkloadSpread", Beta, true, Ignored, OTHER_WORKLOAD),
    gate(
        "StatefulSetAutoDeletePVC",
        Beta,
        true,
        Ignored,
        OTHER_WORKLOAD,
    ),
    gate(
        "StatefulSetStartOrdinal",
        Alpha,
        false,
        Ignored,
        OTHER_WORKLOAD,
    ),
    gate(
        "StatefulSetAutoResizePVCGate",
        Alpha,
        false,
        Ignored,
        OTHER_WORKLOAD,
    ),
    gate(
        "SidecarSetPatchPodMetadataDefaultsAllowed",
        Alpha,
        false,
        Ignored,
        OTHER_WORKLOAD,
    ),
    gate("SidecarTerminator", Alpha, false, Ignored, OTHER_WORKLOAD),
    gate("PodProbeMarkerGate", Beta, true, Ignored, OTHER_WORKLOAD),
    gate(
        "EnablePodProbeMarkerOnServerless",
        Alpha,
        false,
        Ignored,
        OTHER_WORKLOAD,
    ),
    gate(
        "PreDownloadImageForDaemonSetUpdate",
        Alpha,
        false,
        Ignored,
        OTHER_WORKLOAD,
    ),
    gate(
        "ResourceDistributionGate",
        Alpha,
        false,
        Ignored,
        OTHER_WORKLOAD,
    ),
    gate(
        "DeletionProtectionForCRDCascadingGate",
        Alpha,
        false,
        Ignored,
        "CRDs are protected by the ValidatingAdmissionPolicy of deploy/policy, which treats Cascading as Always",
    ),
    gate(
        "EnhancedLivenessProbe",
        Alpha,
        false,
        Ignored,
        OTHER_WORKLOAD,
    ),
    gate("PodIndexLabel", Beta, true, Ignored, OTHER_WORKLOAD),
    gate("EnableExternalCerts", Alpha, false, Ignored, WEBHOOK),
    gate(
        "InPlacePodVerticalScaling",
        Alpha,
        false,
        Ignored,
        "in-place resizes use pods/resize whenever the server serves it",
    ),
    gate(
        "DefaultHostNetworkHostPortsInPodTemplates",
        Stage::Unknown,
        false,
        Ignored,
        "inplace never writes pod-template defaults (see Defaults)",
    ),
];

/// The gate named `name`, if the reference has one.
pub fn reference_gate(name: &str) -> Option<&'static Gate> {
    REFERENCE_GATES.iter().find(|g| g.name == name)
}

/// The gates, split by who reads them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FeatureGates {
    /// Gates the planner reads (and options already set on the base).
    pub plan: PlanOptions,
    /// `CloneSetEventHandlerOptimization`: pod updates that change nothing the CloneSet
    /// decides on do not trigger a reconcile (see [`crate::pod_events`]).
    pub event_handler_optimization: bool,
    /// `ResourcesDeletionProtection`: protected CloneSets carry a finalizer (see
    /// [`crate::plan::protection`]).
    pub deletion_protection: bool,
    /// What was asked for and is not acted on, one line each; logged once at start.
    pub notes: Vec<String>,
}

impl FeatureGates {
    /// Logs [`Self::notes`] (once, at start).
    pub fn log_notes(&self) {
        for note in &self.notes {
            tracing::info!("{note}");
        }
    }
}

fn parse_bool(name: &str, value: &str) -> Result<bool, GateError> {
    value.parse().map_err(|_| GateError::NotABool {
        name: name.to_owned(),
        value: value.to_owned(),
    })
}

/// Parses `spec` over `base` (the planner options set by other flags).
pub fn parse(spec: &str, base: PlanOptions) -> Result<FeatureGates, GateError> {
    // Name -> value as written (the last one wins, as in a map).
    let mut requested: Vec<(&'static str, bool)> = Vec::new();
    let (mut all_alpha, mut all_beta) = (None, None);
    for item in spec.split(',').map(str::trim).filter(|g| !g.is_empty()) {
        let (name, value) = item.split_once('=').unwrap_or((item, "true"));
        let (name, value) = (name.trim(), value.trim());
        let on = parse_bool(name, value)?;
        match name {
            "AllAlpha" => all_alpha = Some(on),
            "AllBeta" => all_beta = Some(on),
            _ => {
                let gate =
                    reference_gate(name).ok_or_else(|| GateError::Unknown(name.to_owned()))?;
                requested.retain(|(n, _)| *n != gate.name);
                requested.push((gate.name, on));
            }
        }
    }
    let explicit = |name: &str| requested.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
    let by_stage = |gate: &Gate| match gate.stage {
        Stage::Alpha => all_alpha,
        Stage::Beta => all_beta,
        Stage::Unknown => None,
    };
    let effective = |gate: &Gate| {
        explicit(gate.name)
            .or_else(|| by_stage(gate))
            .unwrap_or(gate.default)
    };

    let mut notes = Vec::new();
    for (all, stage, value) in [("AllAlpha", Alpha, all_alpha), ("AllBeta", Beta, all_beta)] {
        let Some(value) = value else { continue };
        let switched: Vec<&str> = REFERENCE_GATES
            .iter()
            .filter(|g| g.support == Implemented && g.stage == stage)
            .filter(|g| explicit(g.name).is_none() && g.default != value)
            .map(|g| g.name)
            .collect();
        if !switched.is_empty() {
            notes.push(format!(
                "feature gate {all}={value} turns {} {}",
                if value { "on" } else { "off" },
                switched.join(", ")
            ));
        }
    }
    for gate in REFERENCE_GATES {
        match gate.support {
            Implemented => {}
            Ignored => {
                if let Some(value) = explicit(gate.name) {
                    notes.push(format!(
                        "feature gate {}={value} ignored: {}",
                        gate.name, gate.note
                    ));
                }
            }
            AlwaysOn => {
                if !effective(gate) {
                    notes.push(format!(
                        "feature gate {}=false ignored: {}",
                        gate.name, gate.note
                    ));
                }
            }
        }
    }

    let on = |name: &str| reference_gate(name).is_some_and(effective);
    let mut gates = FeatureGates {
        plan: base,
        event_handler_optimization: on("CloneSetEventHandlerOptimization"),
        deletion_protection: on("ResourcesDeletionProtection"),
        notes,
    };
    let o = &mut gates.plan;
    o.partition_rollback = on("CloneSetPartitionRollback");
    o.short_hash = on("CloneSetShortHash");
    o.in_place_vertical_scaling = on("InPlaceWorkloadVerticalScaling");
    o.recreate_on_vct_change = on("RecreatePodWhenChangeVCTInCloneSetGate");
    o.preparing_update_as_update = on("PreparingUpdateAsUpdate");
    o.pre_download_image = on("PreDownloadImageForInPlaceUpdate");
    if o.pre_download_image && !on("KruiseDaemon") {
        o.pre_download_image = false;
        gates.notes.push(
            "feature gate PreDownloadImageForInPlaceUpdate turned off: KruiseDaemon=false (as in OpenKruise)"
                .to_owned(),
        );
    }
    Ok(gates)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(spec: &str) -> FeatureGates {
        match parse(spec, PlanOptions::default()) {
            Ok(g) => g,
            Err(e) => panic!("{spec}: {e}"),
        }
    }

    /// `(gates, what is on afterwards)`: each implemented switch by name.
    fn switches(g: &FeatureGates) -> Vec<&'static str> {
        let o = &g.plan;
        [
            ("CloneSetPartitionRollback", o.partition_rollback),
            ("CloneSetShortHash", o.short_hash),
            (
                "InPlaceWorkloadVerticalScaling",
                o.in_place_vertical_scaling,
            ),
            (
                "RecreatePodWhenChangeVCTInCloneSetGate",
                o.recreate_on_vct_change,
            ),
            ("PreDownloadImageForInPlaceUpdate", o.pre_download_image),
            ("PreparingUpdateAsUpdate", o.preparing_update_as_update),
            (
                "CloneSetEventHandlerOptimization",
                g.event_handler_optimization,
            ),
            ("ResourcesDeletionProtection", g.deletion_protection),
        ]
        .into_iter()
        .filter(|(_, on)| *on)
        .map(|(n, _)| n)
        .collect()
    }

    const ALL_ALPHA_IMPLEMENTED: [&str; 7] = [
        "CloneSetPartitionRollback",
        "CloneSetShortHash",
        "InPlaceWorkloadVerticalScaling",
        "RecreatePodWhenChangeVCTInCloneSetGate",
        "PreDownloadImageForInPlaceUpdate",
        "PreparingUpdateAsUpdate",
        "CloneSetEventHandlerOptimization",
    ];

    #[test]
    fn table_of_gate_strings() {
        let cases: &[(&str, &[&str])] = &[
            ("", &[]),
            ("CloneSetShortHash", &["CloneSetShortHash"]),
            ("CloneSetShortHash=true,CloneSetShortHash=false", &[]),
            (
                "CloneSetPartitionRollback, PreparingUpdateAsUpdate=true",
                &["CloneSetPartitionRollback", "PreparingUpdateAsUpdate"],
            ),
            (
                "ResourcesDeletionProtection=true",
                &["ResourcesDeletionProtection"],
            ),
            ("AllAlpha=true", &ALL_ALPHA_IMPLEMENTED),
            // Explicit names win over AllAlpha, whatever the order.
            (
                "CloneSetShortHash=false,AllAlpha=true,PreDownloadImageForInPlaceUpdate=false",
                &[
                    "CloneSetPartitionRollback",
                    "InPlaceWorkloadVerticalScaling",
                    "RecreatePodWhenChangeVCTInCloneSetGate",
                    "PreparingUpdateAsUpdate",
                    "CloneSetEventHandlerOptimization",
                ],
            ),
            ("AllBeta=true", &["ResourcesDeletionProtection"]),
            ("AllAlpha=false,AllBeta=false", &[]),
            // AllBeta=false turns KruiseDaemon (beta) off, which turns pre-download off.
            ("AllBeta=false,PreDownloadImageForInPlaceUpdate=true", &[]),
            (
                "KruiseDaemon=false,PreDownloadImageForInPlaceUpdate=true",
                &[],
            ),
            (
                "AllBeta=false,KruiseDaemon=true,PreDownloadImageForInPlaceUpdate=true",
                &["PreDownloadImageForInPlaceUpdate"],
            ),
            // OpenKruise's own manifests: kustomize and the Helm chart.
            ("AllAlpha=true,AllBeta=true", &{
                let mut all = ALL_ALPHA_IMPLEMENTED.to_vec();
                all.push("ResourcesDeletionProtection");
                all
            }),
            ("ImagePullJobGate=true", &[]),
        ];
        for (spec, want) in cases {
            let g = parsed(spec);
            let mut have = switches(&g);
            let mut want = want.to_vec();
            have.sort_unstable();
            want.sort_unstable();
            assert_eq!(have, want, "--feature-gates={spec}");
        }
    }

    #[test]
    fn every_reference_gate_name_is_accepted() {
        for gate in REFERENCE_GATES {
            for value in ["true", "false"] {
                let spec = format!("{}={value}", gate.name);
                assert!(parse(&spec, PlanOptions::default()).is_ok(), "{spec}");
            }
        }
        let all: Vec<String> = REFERENCE_GATES
            .iter()
            .map(|g| format!("{}=true", g.name))
            .collect();
        assert!(parse(&all.join(","), PlanOptions::default()).is_ok());
    }

    #[test]
    fn the_table_has_each_gate_once_and_notes_for_all() {
        for (i, g) in REFERENCE_GATES.iter().enumerate() {
            assert!(
                !REFERENCE_GATES[..i].iter().any(|o| o.name == g.name),
                "{} twice",
                g.name
            );
            assert!(!g.note.is_empty(), "{}", g.name);
        }
    }

    #[test]
    fn ignored_gates_are_noted_once_and_implemented_ones_not() {
        let g = parsed("ImagePullJobGate=true,WorkloadSpread=false,CloneSetShortHash=true");
        assert_eq!(g.notes.len(), 2, "{:?}", g.notes);
        assert!(
            g.notes[0].starts_with("feature gate ImagePullJobGate=true ignored:")
                || g.notes[1].starts_with("feature gate ImagePullJobGate=true ignored:"),
            "{:?}",
            g.notes
        );
        assert!(
            g.notes
                .iter()
                .any(|n| n.starts_with("feature gate WorkloadSpread=false ignored:"))
        );

        // Always-on behaviour switched off is noted, on is silent.
        assert!(parsed("InPlaceUpdateEnvFromMetadata=true").notes.is_empty());
        let off = parsed("InPlaceUpdateEnvFromMetadata=false");
        assert_eq!(off.notes.len(), 1);
        assert!(off.notes[0].contains("always"), "{:?}", off.notes);
        let all_beta_off = parsed("AllBeta=false");
        assert!(
            all_beta_off
                .notes
                .iter()
                .any(|n| n.starts_with("feature gate InPlaceUpdateEnvFromMetadata=false ignored")),
            "{:?}",
            all_beta_off.notes
        );

        // AllAlpha names what it turned on; a dependency names why a gate is off.
        let all = parsed("AllAlpha=true");
        assert!(
            all.notes
                .iter()
                .any(|n| n.starts_with("feature gate AllAlpha=true turns on")
                    && n.contains("PreparingUpdateAsUpdate")
                    && !n.contains("ResourcesDeletionProtection")),
            "{:?}",
            all.notes
        );
        let dep = parsed("KruiseDaemon=false,PreDownloadImageForInPlaceUpdate=true");
        assert!(
            dep.notes.iter().any(|n| n.contains("KruiseDaemon=false")),
            "{:?}",
            dep.notes
        );
    }

    #[test]
    fn gates_keep_the_base_options() -> Result<(), GateError> {
        let base = PlanOptions {
            exclude_preparing_delete: true,
            ..PlanOptions::default()
        };
        let g = parse("CloneSetShortHash=false", base.clone())?;
        assert_eq!(g.plan, base);
        assert!(!g.event_handler_optimization);
        assert_eq!(parse("", base.clone())?.plan, base);
        Ok(())
    }

    #[test]
    fn typos_and_non_booleans_are_errors() {
        assert_eq!(
            parse("CloneSetShortHas=true", PlanOptions::default()),
            Err(GateError::Unknown("CloneSetShortHas".into()))
        );
        assert_eq!(
            parse("AllGA=true", PlanOptions::default()),
            Err(GateError::Unknown("AllGA".into()))
        );
        assert_eq!(
            parse("CloneSetShortHash=yes", PlanOptions::default()),
            Err(GateError::NotABool {
                name: "CloneSetShortHash".into(),
                value: "yes".into()
            })
        );
        assert_eq!(
            parse("AllAlpha=1", PlanOptions::default()),
            Err(GateError::NotABool {
                name: "AllAlpha".into(),
                value: "1".into()
            })
        );
    }

    /// The user guide's feature-gate table (docs/user-guide.md) lists every gate of the reference.
    #[test]
    fn the_readme_lists_every_gate() {
        let readme = include_str!("../../docs/user-guide.md");
        for gate in REFERENCE_GATES {
            assert!(
                readme.contains(&format!("| `{}` |", gate.name)),
                "docs/user-guide.md: no row for feature gate {}",
                gate.name
            );
        }
    }
}
