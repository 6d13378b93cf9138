//! `--feature-gates`: the reference's gate names that change this controller's behaviour,
//! parsed into the planner's options and the runtime's switches.
//!
//! Format: `Name=true,Other=false` (a bare `Name` means true). Unknown names are an error,
//! so that a typo does not silently leave a gate off.

use crate::plan::PlanOptions;

/// A gate string that cannot be honoured.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GateError {
    #[error("feature gate {name}: {value:?} is not true/false")]
    NotABool { name: String, value: String },
    #[error("unknown feature gate {0}")]
    Unknown(String),
}

/// The gates, split by who reads them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FeatureGates {
    /// Gates the planner reads (and options already set on the base).
    pub plan: PlanOptions,
    /// `CloneSetEventHandlerOptimization`: pod updates that change nothing the CloneSet
    /// decides on do not trigger a reconcile (see [`crate::pod_events`]).
    pub event_handler_optimization: bool,
}

/// Parses `spec` over `base` (the planner options set by other flags).
pub fn parse(spec: &str, base: PlanOptions) -> Result<FeatureGates, GateError> {
    let mut gates = FeatureGates {
        plan: base,
        ..FeatureGates::default()
    };
    for gate in spec.split(',').map(str::trim).filter(|g| !g.is_empty()) {
        let (name, value) = gate.split_once('=').unwrap_or((gate, "true"));
        let (name, value) = (name.trim(), value.trim());
        let on: bool = value.parse().map_err(|_| GateError::NotABool {
            name: name.to_owned(),
            value: value.to_owned(),
        })?;
        let o = &mut gates.plan;
        match name {
            "CloneSetPartitionRollback" => o.partition_rollback = on,
            "CloneSetShortHash" => o.short_hash = on,
            "InPlaceWorkloadVerticalScaling" => o.in_place_vertical_scaling = on,
            "RecreatePodWhenChangeVCTInCloneSetGate" => o.recreate_on_vct_change = on,
            "PreDownloadImageForInPlaceUpdate" => o.pre_download_image = on,
            "CloneSetEventHandlerOptimization" => gates.event_handler_optimization = on,
            other => return Err(GateError::Unknown(other.to_owned())),
        }
    }
    Ok(gates)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_gate_is_read_and_a_bare_name_means_true() -> Result<(), GateError> {
        let g = parse(
            "CloneSetPartitionRollback, CloneSetShortHash=true,InPlaceWorkloadVerticalScaling=true,\
             RecreatePodWhenChangeVCTInCloneSetGate=true,PreDownloadImageForInPlaceUpdate=true,\
             CloneSetEventHandlerOptimization=true",
            PlanOptions::default(),
        )?;
        assert!(g.plan.partition_rollback && g.plan.short_hash);
        assert!(g.plan.in_place_vertical_scaling && g.plan.recreate_on_vct_change);
        assert!(g.plan.pre_download_image && g.event_handler_optimization);
        Ok(())
    }

    #[test]
    fn gates_default_off_and_keep_the_base_options() -> Result<(), GateError> {
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
            parse("CloneSetShortHash=yes", PlanOptions::default()),
            Err(GateError::NotABool {
                name: "CloneSetShortHash".into(),
                value: "yes".into()
            })
        );
    }
}
