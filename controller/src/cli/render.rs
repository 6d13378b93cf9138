//! The two output forms of the plan command: one JSON object, or a table in words.

use std::fmt::Write as _;

use inplace_proto::CloneSet;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::plan::action_write::{Target, Write, template_of_recipe};
use crate::plan::status_write::StatusWrite;
use crate::plan::{Action, DeleteReason, Plan, StepWrite, UpdateMethod};

/// The JSON object: `resolved`, `diffs`, `revisions`, `steps` (each action with its
/// `write`, or the `writeError` why it cannot be planned), `actions` (the steps' actions
/// alone, for scripts), `status`, `statusWrite` (its write when no step fails, with the
/// problems' events: [`crate::plan::status_write`]), and `podConditions` (the
/// readiness-gate conditions written besides the steps), `problems` and
/// `requeueAfterSeconds` when there are any.
pub fn json(plan: &Plan) -> Value {
    let revisions = &plan.revisions;
    let mut out = json!({
        "resolved": plan.resolved,
        "diffs": plan.diffs,
        "revisions": {
            "update": revisions.update_revision,
            "current": revisions.current_revision,
            "create": revisions.create.as_ref().and_then(|r| r.metadata.name.clone()),
            "bump": revisions.bump.as_ref().map(|r| json!({
                "name": r.metadata.name,
                "revision": r.revision,
            })),
            "delete": revisions.delete,
            "collisionCount": revisions.collision_count,
        },
        "steps": plan.steps,
        "actions": plan.actions(),
        "status": plan.status,
        "statusWrite": plan.status_write,
    });
    if !plan.pod_conditions.is_empty() {
        out["podConditions"] = json!(plan.pod_conditions);
    }
    if !plan.problems.is_empty() {
        out["problems"] = json!(plan.problems);
    }
    if let Some(after) = plan.requeue_after {
        out["requeueAfterSeconds"] = json!(after.as_secs_f64());
    }
    out
}

fn reason_words(reason: DeleteReason) -> &'static str {
    match reason {
        DeleteReason::PreparingDeleteReleased => "its preDelete hook was released",
        DeleteReason::SpecifiedDelete => "specified for deletion",
        DeleteReason::ScaleDown => "scale down",
        DeleteReason::SurgeEnd => "surge no longer needed",
    }
}

/// One action in words.
pub fn describe(cs: &CloneSet, action: &Action) -> String {
    let cs_name = cs.metadata.name.as_deref().unwrap_or_default();
    let vcts: Vec<&str> = cs
        .spec
        .volume_claim_templates
        .iter()
        .filter_map(|v| v.name())
        .collect();
    match action {
        Action::Create {
            revision,
            instance_id,
        } => {
            let mut s = format!("create pod {cs_name}-{instance_id} from revision {revision}");
            if !vcts.is_empty() {
                let claims: Vec<String> = vcts
                    .iter()
                    .map(|v| format!("{v}-{cs_name}-{instance_id}"))
                    .collect();
                let _ = write!(s, " with PVC {} (kept if it exists)", claims.join(", "));
            }
            s
        }
        Action::Delete { pod, reason } => {
            let pvcs = if vcts.is_empty() { "" } else { " and its PVCs" };
            format!("delete pod {pod}{pvcs} ({})", reason_words(*reason))
        }
        Action::Update {
            pod,
            method: UpdateMethod::InPlace,
            revision,
        } => format!("update pod {pod} in place to revision {revision}"),
        Action::Update {
            pod,
            method: UpdateMethod::Recreate,
            revision,
        } => format!(
            "recreate pod {pod} on revision {revision} (label it apps.kruise.io/specified-delete; a later scale step replaces it)"
        ),
        Action::Lifecycle {
            pod,
            from,
            to,
            mark_not_ready,
        } => {
            let from = from.map_or("no state", |f| f.as_str());
            let mark = match mark_not_ready {
                Some(true) => ", marking it not ready (KruisePodReady)",
                Some(false) => ", marking it ready again (KruisePodReady)",
                None => "",
            };
            format!("move pod {pod} from {from} to {to}{mark}")
        }
        Action::CompleteInPlaceUpdate { pod } => {
            format!("finish the in-place update of pod {pod} (InPlaceUpdateReady=True)")
        }
        Action::ApplyGracedUpdate { pod } => {
            format!("apply the held in-place update of pod {pod} (grace period over)")
        }
        Action::ReportInPlaceStall {
            pod,
            reason,
            message,
        } => format!("report on pod {pod} (InPlaceUpdateReady False, {reason}): {message}"),
        Action::DeletePvc { pvc } => {
            format!("delete PVC {pvc} (disablePVCReuse, no pod uses it)")
        }
        Action::ReownPvcToPod { pvc, pod } => {
            format!("hand PVC {pvc} over to its finished pod {pod} (disablePVCReuse)")
        }
        Action::SetTemplateHash { pod, hash } => {
            format!("label pod {pod} pod-template-hash={hash} (missing on pods made before it)")
        }
        Action::ApplyNextContainerBatch { pod } => {
            format!("start the next container batch of pod {pod}'s in-place update")
        }
        Action::PrunePodsToDelete { names } => format!(
            "remove {} from spec.scaleStrategy.podsToDelete (no such pod any more)",
            names.join(", ")
        ),
        Action::AddFinalizer { finalizer } => format!(
            "add the finalizer {finalizer} to CloneSet {cs_name} (ResourcesDeletionProtection; a reconcile of its own, before the rest)"
        ),
        Action::RemoveFinalizer { finalizer } => format!(
            "remove the finalizer {finalizer} from CloneSet {cs_name} (not protected, or the gate is off; a reconcile of its own, before the rest)"
        ),
        Action::HoldDeletion { message } => {
            format!(
                "hold the deletion of CloneSet {cs_name} (Warning event DeletionProtected): {message}"
            )
        }
        Action::AdoptPod { pod } => format!(
            "adopt orphan pod {pod} (it matches the selector; with the other claims, a reconcile of their own, before the rest)"
        ),
        Action::ReleasePod { pod } => format!(
            "release pod {pod} (it no longer matches the selector; with the other claims, a reconcile of their own, before the rest)"
        ),
        Action::CreateImagePullJob { job, image } => format!(
            "create ImagePullJob {job} to pull {image} on the nodes of the pods still to update (image pre-download)"
        ),
        Action::DeleteImagePullJob { job } => {
            format!("delete ImagePullJob {job} (the revisions have converged)")
        }
        Action::LabelPreDownloadRevision {
            revision,
            ignored: None,
        } => format!(
            "label revision {revision} pre-download created (once every ImagePullJob is created)"
        ),
        Action::LabelPreDownloadRevision {
            revision,
            ignored: Some(reason),
        } => format!("label revision {revision} pre-download ignored: {reason}"),
    }
}

fn limit(v: i32) -> String {
    if v == i32::MAX {
        "unlimited".into()
    } else {
        v.to_string()
    }
}

/// The table form: the same content in words.
pub fn table(cs: &CloneSet, plan: &Plan, pod_count: usize) -> String {
    let mut s = String::new();
    let name = cs.metadata.name.as_deref().unwrap_or_default();
    let ns = cs.metadata.namespace.as_deref().unwrap_or("default");
    let r = &plan.resolved;
    let d = &plan.diffs;
    let rev = &plan.revisions;
    let _ = writeln!(
        s,
        "CloneSet {ns}/{name}: {} replicas, update type {}",
        r.replicas,
        cs.update_type().as_str()
    );
    let _ = writeln!(
        s,
        "  partition {}, maxSurge {}, maxUnavailable {}, scaleStrategy.maxUnavailable {}",
        r.partition,
        r.max_surge,
        r.max_unavailable,
        limit(r.scale_max_unavailable)
    );
    let _ = writeln!(s, "\nRevisions");
    let state = if rev.create.is_some() {
        " (not among the known revisions: the controller creates it)"
    } else if rev.bump.is_some() {
        " (an older revision again: its number is bumped)"
    } else {
        ""
    };
    let _ = writeln!(s, "  update   {}{state}", rev.update_revision);
    let _ = writeln!(s, "  current  {}", rev.current_revision);
    if !rev.delete.is_empty() {
        let _ = writeln!(
            s,
            "  delete   {} (beyond revisionHistoryLimit)",
            rev.delete.join(", ")
        );
    }

    let _ = writeln!(s, "\nArithmetic ({pod_count} pods given)");
    let rows = [
        ("scaleUp", d.scale_up, "pods to create (surge included)"),
        (
            "scaleUpOldRevision",
            d.scale_up_old_revision,
            "of which from the current revision",
        ),
        ("scaleUpLimit", d.scale_up_limit, "most pods created now"),
        ("scaleDown", d.scale_down, "pods to delete"),
        (
            "scaleDownOldRevision",
            d.scale_down_old_revision,
            "of which from old revisions",
        ),
        (
            "deleteReadyLimit",
            d.delete_ready_limit,
            "most ready pods deleted now",
        ),
        ("useSurge", d.use_surge, "surge pods in use"),
        (
            "useSurgeOldRevision",
            d.use_surge_old_revision,
            "of which on the current revision",
        ),
        (
            "update",
            d.update,
            "pods to move to the update revision (negative: back to current)",
        ),
        (
            "updateMaxUnavailable",
            d.update_max_unavailable,
            "unavailability budget of the update",
        ),
    ];
    for (key, value, words) in rows {
        let _ = writeln!(s, "  {key:<22}{:>6}  {words}", limit(value));
    }

    let _ = writeln!(s, "\nNext step");
    if plan.steps.is_empty() && plan.pod_conditions.is_empty() {
        let _ = writeln!(s, "  nothing to do");
    }
    for w in &plan.pod_conditions {
        let _ = writeln!(
            s,
            "  - set {} True on pod {} (its readiness gates; only on resourceVersion {})",
            w.conditions.join(" and "),
            w.pod,
            if w.resource_version.is_empty() {
                "-"
            } else {
                &w.resource_version
            }
        );
    }
    for (i, step) in plan.steps.iter().enumerate() {
        let action = &step.action;
        let _ = writeln!(s, "  {}. {}", i + 1, describe(cs, action));
        match &step.write {
            Err(err) => {
                let _ = writeln!(
                    s,
                    "     writes: nothing, the write cannot be planned: {err}"
                );
            }
            Ok(StepWrite::Lifecycle(w)) => {
                if w.labels.len() > 1 || !w.finalizers.is_empty() {
                    let labels: Vec<String> = w
                        .labels
                        .iter()
                        .filter(|(k, _)| k.as_str() != inplace_proto::keys::LIFECYCLE_STATE_LABEL)
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect();
                    let _ = writeln!(
                        s,
                        "     putting the inPlaceUpdate hook back: labels [{}], finalizers [{}]",
                        labels.join(", "),
                        w.finalizers.join(", ")
                    );
                }
            }
            Ok(StepWrite::Completion(w)) => {
                let lifecycle = w
                    .lifecycle_labels
                    .get(inplace_proto::keys::LIFECYCLE_STATE_LABEL)
                    .map(|state| format!(", with lifecycle state {state} in the same patch"))
                    .unwrap_or_default();
                let _ = writeln!(
                    s,
                    "     writes: patch status of pod {}: InPlaceUpdateReady True{lifecycle} ({})",
                    w.pod,
                    only_on(Some(&w.resource_version))
                );
            }
            Ok(StepWrite::InPlace(w)) => {
                let _ = writeln!(s, "     {}", in_place_write_words(w));
            }
            Ok(StepWrite::Object(w)) => {
                let _ = writeln!(s, "     {}", action_write_words(w));
            }
            Ok(StepWrite::Nothing { why }) => {
                let _ = writeln!(s, "     writes: nothing ({why})");
            }
        }
    }
    for p in &plan.problems {
        let _ = writeln!(s, "  ! {} {}: {}", p.condition, p.reason, p.message);
    }
    if let Some(after) = plan.requeue_after {
        let _ = writeln!(
            s,
            "  then look again after {:.0}s at the latest",
            after.as_secs_f64().ceil()
        );
    }

    let st = &plan.status;
    let _ = writeln!(s, "\nStatus the controller would write");
    let _ = writeln!(
        s,
        "  replicas {}, ready {}, available {}, updated {}, updatedReady {}, updatedAvailable {}, expectedUpdated {}",
        st.replicas,
        st.ready_replicas,
        st.available_replicas,
        st.updated_replicas,
        st.updated_ready_replicas,
        st.updated_available_replicas.unwrap_or(0),
        st.expected_updated_replicas
            .map_or("-".into(), |v| v.to_string()),
    );
    let _ = writeln!(
        s,
        "  currentRevision {}, updateRevision {}, collisionCount {}",
        st.current_revision.as_deref().unwrap_or("-"),
        st.update_revision.as_deref().unwrap_or("-"),
        st.collision_count.unwrap_or(0)
    );
    if let Some(sel) = &st.label_selector {
        let _ = writeln!(s, "  labelSelector {sel}");
    }
    for c in &st.conditions {
        let _ = writeln!(
            s,
            "  condition {}={} {}{}",
            c.type_,
            c.status,
            c.reason.as_deref().unwrap_or(""),
            c.message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        );
    }
    status_write_words(&mut s, &plan.status_write);
    s
}

/// The status write and the problems' events, in words (the write sent when no step fails).
fn status_write_words(s: &mut String, w: &StatusWrite) {
    match w.patch_when_no_step_fails() {
        Ok(Some(_)) => {
            let _ = writeln!(
                s,
                "  writes: merge patch of the status of CloneSet {}/{} ({})",
                w.namespace,
                w.name,
                only_on(w.resource_version.as_deref())
            );
        }
        Ok(None) => {
            let _ = writeln!(s, "  writes: nothing (the status is unchanged)");
        }
        Err(e) => {
            let _ = writeln!(s, "  writes: nothing, the status cannot be encoded: {e}");
        }
    }
    for e in w.events() {
        let _ = writeln!(
            s,
            "  event {} {} ({}) regarding the CloneSet: {}",
            if e.warning { "Warning" } else { "Normal" },
            e.reason,
            e.action,
            e.message
        );
    }
}

/// Adds to the write of each create among `out["steps"]` (from [`json`]) the objects its recipe
/// renders to (the pod as `object`, the PVCs to create as `pvcObjects`), by the function
/// the applier renders them with; `now` stamps the lifecycle timestamp. A create whose
/// revision's template is not given is left as its recipe.
pub fn with_created_objects(
    out: &mut Value,
    plan: &Plan,
    cs: &CloneSet,
    revisions: &[ControllerRevision],
    now: Timestamp,
) {
    let Some(shown) = out.get_mut("steps").and_then(Value::as_array_mut) else {
        return;
    };
    for (shown, step) in shown.iter_mut().zip(&plan.steps) {
        let Ok(StepWrite::Object(Write::Create(recipe))) = &step.write else {
            continue;
        };
        let shown = &mut shown["write"];
        let Ok(template) =
            template_of_recipe(recipe, cs, revisions, &plan.revisions.update_revision)
        else {
            continue;
        };
        let rendered = recipe.render(cs, &template, now);
        shown["object"] = rendered.pod;
        if !rendered.pvcs.is_empty() {
            shown["pvcObjects"] = Value::Array(rendered.pvcs);
        }
    }
}

/// The precondition of a write, in words.
fn only_on(resource_version: Option<&str>) -> String {
    match resource_version {
        Some(rv) => format!("only on resourceVersion {rv}"),
        None => "on any version".to_owned(),
    }
}

/// What one planned write of [`crate::plan::action_write`] sends, in words (one line).
fn action_write_words(w: &Write) -> String {
    match w {
        Write::Create(r) => {
            let labels: Vec<String> = r.labels().iter().map(|(k, v)| format!("{k}={v}")).collect();
            let pvcs = if r.pvcs.is_empty() {
                String::new()
            } else {
                format!("PVC {} first, then ", r.pvcs.join(", "))
            };
            format!(
                "writes: {pvcs}pod {} from the template with labels [{}]",
                r.pod,
                labels.join(", ")
            )
        }
        Write::DeletePod { pod, uid, pvcs } => {
            let mut s = format!("writes: delete pod {pod} only with UID {uid}");
            for p in pvcs {
                let _ = write!(s, ", then PVC {} only with UID {}", p.pvc, p.uid);
            }
            s
        }
        Write::DeletePvc(p) => format!("writes: delete PVC {} only with UID {}", p.pvc, p.uid),
        Write::Patch(p) => {
            let target = match p.target {
                Target::Pod => "pod",
                Target::PodStatus => "status of pod",
                Target::Pvc => "PVC",
                Target::CloneSet => "CloneSet",
                Target::ControllerRevision => "ControllerRevision",
            };
            let stamp = if p.stamp_conditions {
                ", conditions stamped with the write time"
            } else {
                ""
            };
            // An owner-reference patch carries the pod's UID as its precondition.
            let on = match p.patch.pointer("/metadata/uid").and_then(Value::as_str) {
                Some(uid) if p.resource_version.is_none() => format!("only on UID {uid}"),
                _ => only_on(p.resource_version.as_deref()),
            };
            format!(
                "writes: patch {target} {} {} ({on}{stamp})",
                p.name, p.patch
            )
        }
        Write::CreateImagePullJob { job } => format!(
            "writes: create ImagePullJob {} pulling {} (one that exists already is fine)",
            job.metadata.name.as_deref().unwrap_or_default(),
            job.spec.image
        ),
        Write::DeleteImagePullJob { job, uid } => {
            format!("writes: delete ImagePullJob {job} only with UID {uid}")
        }
        Write::Skip { why } => format!("writes: nothing ({why})"),
    }
}

/// What an in-place write sends, in words (one line).
fn in_place_write_words(w: &crate::plan::inplace_write::InPlaceWrite) -> String {
    use crate::plan::inplace_write::ResizeVia;
    let mut parts = Vec::new();
    if w.not_ready_first {
        parts.push(format!(
            "{} False first",
            inplace_proto::keys::INPLACE_UPDATE_READY_CONDITION
        ));
    }
    let patch = w.patch.to_value();
    let images: Vec<String> = patch
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| {
            Some(format!(
                "{}={}",
                c.get("name")?.as_str()?,
                c.get("image")?.as_str()?
            ))
        })
        .collect();
    let annotations = patch.pointer("/metadata/annotations");
    let held = annotations
        .and_then(|a| a.get(inplace_proto::keys::INPLACE_UPDATE_GRACE_ANNOTATION))
        .is_some_and(Value::is_string);
    if held {
        parts.push("the update held in the grace annotation".to_owned());
    } else if images.is_empty() {
        parts.push("no image change".to_owned());
    } else {
        parts.push(format!("images [{}]", images.join(", ")));
    }
    let state: Option<inplace_proto::InPlaceUpdateState> = annotations
        .and_then(|a| a.get(inplace_proto::keys::INPLACE_UPDATE_STATE_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(|raw| serde_json::from_str(raw).ok());
    if let Some(state) = state.filter(|s| s.has_next_batch()) {
        let next: std::collections::BTreeSet<&String> = state
            .next_container_images
            .keys()
            .chain(state.next_container_ref_metadata.keys())
            .chain(state.next_container_resources.keys())
            .chain(&state.next_container_restarts)
            .collect();
        let next: Vec<&str> = next.into_iter().map(String::as_str).collect();
        parts.push(format!("later batch [{}]", next.join(", ")));
    }
    if let Some(r) = &w.resize {
        let names: Vec<&str> = r.containers.keys().map(String::as_str).collect();
        let via = match r.via {
            ResizeVia::Subresource => "through pods/resize",
            ResizeVia::Spec => "in the pod spec",
            ResizeVia::Unsupported => "not changed (no pods/resize)",
        };
        parts.push(format!("resources of [{}] {via}", names.join(", ")));
    }
    format!(
        "writes: {} (only on resourceVersion {})",
        parts.join("; "),
        if w.resource_version.is_empty() {
            "-"
        } else {
            &w.resource_version
        }
    )
}
