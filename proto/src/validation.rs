//! The validation the CRDs carry beyond what the Rust types derive: CEL
//! `x-kubernetes-validations` rules and a few schema keywords, per kind, placed at schema
//! paths by [`crate::crdgen`].
//!
//! Why a table and not `#[x_kube(validation = ...)]` attributes: most constraints of the
//! reference are cross-field (they need `spec.replicas` and `spec.updateStrategy` at
//! once) and several sit inside types we do not own (`LabelSelector` of k8s-openapi).
//! One table, next to the reference constraint it implements, keeps every rule
//! reviewable in one place; crdgen fails when a path no longer exists in the schema, and
//! the tests find each rule in the generated CRD by its message and evaluate it there.
//!
//! Conventions of the rules:
//! - Only `rule` and `message` are emitted (no `fieldPath`, `reason` or
//!   `messageExpression`): those fields are unknown to API servers before 1.28 and would
//!   make client-side `kubectl apply` fail there.
//! - An absent optional field is absent in CEL (the API server prunes `null`s of
//!   non-nullable fields, and crdgen strips `nullable`), so every access is guarded by
//!   `has()`, even of required fields (a missing required field then gives only the
//!   "required" error, not also a CEL evaluation error); defaults of the reference (maxUnavailable 20%, maxSurge 0, replicas 1,
//!   minReadySeconds 0, pull timeout 600) are written out in the rules.
//! - int-or-string values are `dyn` in CEL: `type(self) == int ? ... : ...`. Percent
//!   strings are matched with anchored RE2 expressions instead of being parsed, because
//!   "rounded up, is it below 1?" is "is it 0%" for any replicas > 0.
//! - Each rule judges one concern and passes values that another rule rejects (a
//!   malformed `maxSurge: "abc"` fails only the format rule), so that one mistake gives one
//!   message.
//! - Cost: the API server (≥ 1.25) refuses a CRD whose rules have a too high estimated
//!   cost (10^7 per rule, 10^8 in total; unbounded lists and maps are estimated from the
//!   3 MiB request limit, strings likewise). No rule here iterates a list. The one rule
//!   that iterates a map (selector labels contained in template labels) would be
//!   estimated at ~500k entries × ~20 per entry, over the limit; it is bounded by
//!   `maxProperties: 64` on `selector.matchLabels` and `maxLength: 63` on label values
//!   (the Kubernetes limit for label values anyway). A selector with more than 64 labels
//!   is thus refused; the reference has no such limit, but no real selector comes close.
//!   The int-or-string `matches()` rules are estimated at ~1.2M each (3 MiB × 0.1 ×
//!   pattern factor), under the limit without bounds.
//!
//! Constraints deliberately not expressed (the planner reports them as a condition):
//! - template `restartPolicy` Always-or-empty and `activeDeadlineSeconds` forbidden: the
//!   pod template is preserved as-is (`x-kubernetes-preserve-unknown-fields`, like the
//!   reference's CRD), so its fields are invisible to CEL.
//! - selector `matchExpressions` against template labels: matching `In`/`NotIn` needs a
//!   scan of each expression's values inside a scan of the expressions; without `maxItems`
//!   bounds (which the reference API does not have) that exceeds the cost budget. Only
//!   `matchLabels` containment is a rule; expression syntax is checked per expression.
//! - `podsToDelete` names that must exist and belong to this CloneSet, image references
//!   that must parse, CRR containers that must exist in the pod: they need other objects.

/// A CEL rule at a schema path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CelRule {
    /// Stable identifier, used by the tests' table names. Not emitted.
    pub id: &'static str,
    /// Schema path: dot-separated property names from the root of `openAPIV3Schema`,
    /// `[]` after a name for its items, `*` for `additionalProperties`.
    pub path: &'static str,
    /// The CEL expression; `self` is the value at `path`.
    pub rule: &'static str,
    /// What the user sees when the rule fails.
    pub message: &'static str,
}

/// A schema keyword set at a schema path (bounds and list types the derive cannot place).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchemaKeyword {
    pub path: &'static str,
    pub keyword: &'static str,
    pub value: KeywordValue,
}

/// Value of a [`SchemaKeyword`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeywordValue {
    Int(i64),
    Str(&'static str),
}

/// A label selector's own validity, placed on every selector: each expression has a
/// known operator, `In`/`NotIn` carry values, `Exists`/`DoesNotExist` carry none.
const SELECTOR_EXPRESSION_RULE: &str = "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) : (self.operator in ['Exists', 'DoesNotExist'] ? (!has(self.values) || size(self.values) == 0) : false)";
const SELECTOR_EXPRESSION_MESSAGE: &str =
    "operator must be In or NotIn with values, or Exists or DoesNotExist without values";
/// Non-empty selector (the reference rejects a selector that selects everything).
const SELECTOR_NOT_EMPTY_RULE: &str = "(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)";

/// CEL rules of CloneSet, after the reference's validating webhook (OpenKruise
/// `pkg/webhook/cloneset/validating/validation.go`).
pub const CLONESET_RULES: &[CelRule] = &[
    CelRule {
        id: "selector_not_empty",
        path: "spec.selector",
        rule: SELECTOR_NOT_EMPTY_RULE,
        message: "selector must not be empty: set matchLabels or matchExpressions",
    },
    CelRule {
        id: "selector_immutable",
        path: "spec.selector",
        rule: "self == oldSelf",
        message: "selector is immutable",
    },
    CelRule {
        id: "selector_expression_valid",
        path: "spec.selector.matchExpressions[]",
        rule: SELECTOR_EXPRESSION_RULE,
        message: SELECTOR_EXPRESSION_MESSAGE,
    },
    CelRule {
        id: "selector_matches_template_labels",
        path: "spec",
        rule: "!has(self.selector) || !has(self.template) || !has(self.selector.matchLabels) || size(self.selector.matchLabels) == 0 || (has(self.template.metadata) && has(self.template.metadata.labels) && self.selector.matchLabels.all(k, k in self.template.metadata.labels && self.template.metadata.labels[k] == self.selector.matchLabels[k]))",
        message: "selector.matchLabels must be contained in template.metadata.labels",
    },
    CelRule {
        id: "progress_deadline_exceeds_min_ready",
        path: "spec",
        rule: "!has(self.progressDeadlineSeconds) || self.progressDeadlineSeconds == 2147483647 || self.progressDeadlineSeconds > (has(self.minReadySeconds) ? self.minReadySeconds : 0)",
        message: "progressDeadlineSeconds must be greater than minReadySeconds (or 2147483647 for no deadline)",
    },
    CelRule {
        id: "max_surge_forbidden_with_in_place_only",
        path: "spec",
        rule: "!has(self.updateStrategy) || !has(self.updateStrategy.type) || self.updateStrategy.type != 'InPlaceOnly' || !has(self.updateStrategy.maxSurge) || (type(self.updateStrategy.maxSurge) == int ? self.updateStrategy.maxSurge <= 0 : (!self.updateStrategy.maxSurge.matches('^[0-9]+%$') || self.updateStrategy.maxSurge.matches('^0+%$') || (has(self.replicas) && self.replicas == 0)))",
        message: "maxSurge must be 0 with updateStrategy.type InPlaceOnly",
    },
    CelRule {
        id: "max_unavailable_and_max_surge_not_both_zero",
        path: "spec",
        rule: "(has(self.replicas) && self.replicas == 0) || !has(self.updateStrategy) || !has(self.updateStrategy.maxUnavailable) || !((type(self.updateStrategy.maxUnavailable) == int ? self.updateStrategy.maxUnavailable < 1 : self.updateStrategy.maxUnavailable.matches('^0+%$')) && (!has(self.updateStrategy.maxSurge) || (type(self.updateStrategy.maxSurge) == int ? self.updateStrategy.maxSurge < 1 : self.updateStrategy.maxSurge.matches('^0+%$'))))",
        message: "maxUnavailable and maxSurge must not both be 0 (percentages round up) when replicas > 0",
    },
    CelRule {
        id: "partition_int_or_percent",
        path: "spec.updateStrategy.partition",
        rule: "type(self) == int ? self >= 0 : self.matches('^0*([0-9]{1,2}|100)%$')",
        message: "partition must be an integer >= 0 or a percentage from 0% to 100%",
    },
    CelRule {
        id: "max_unavailable_int_or_percent",
        path: "spec.updateStrategy.maxUnavailable",
        rule: "type(self) == int ? self >= 0 : self.matches('^[0-9]+%$')",
        message: "maxUnavailable must be an integer >= 0 or a percentage such as 20%",
    },
    CelRule {
        id: "max_surge_int_or_percent",
        path: "spec.updateStrategy.maxSurge",
        rule: "type(self) == int ? self >= 0 : self.matches('^[0-9]+%$')",
        message: "maxSurge must be an integer >= 0 or a percentage such as 10%",
    },
    CelRule {
        id: "scale_max_unavailable_int_or_percent",
        path: "spec.scaleStrategy.maxUnavailable",
        rule: "type(self) == int ? self >= 0 : self.matches('^[0-9]+%$')",
        message: "scaleStrategy.maxUnavailable must be an integer >= 0 or a percentage such as 10%",
    },
    CelRule {
        id: "priority_weight_or_order",
        path: "spec.updateStrategy.priorityStrategy",
        rule: "!(has(self.weightPriority) && size(self.weightPriority) > 0 && has(self.orderPriority) && size(self.orderPriority) > 0)",
        message: "weightPriority and orderPriority are mutually exclusive",
    },
    CelRule {
        id: "priority_selector_not_empty",
        path: "spec.updateStrategy.priorityStrategy.weightPriority[].matchSelector",
        rule: SELECTOR_NOT_EMPTY_RULE,
        message: "weightPriority matchSelector must not be empty",
    },
    CelRule {
        id: "priority_selector_expression_valid",
        path: "spec.updateStrategy.priorityStrategy.weightPriority[].matchSelector.matchExpressions[]",
        rule: SELECTOR_EXPRESSION_RULE,
        message: SELECTOR_EXPRESSION_MESSAGE,
    },
];

/// Schema keywords of CloneSet. Derived already (see the attributes in
/// [`crate::cloneset`]): `replicas` and the other counts ≥ 0, weight 0–100, orderedKey and
/// scatter key non-empty, `podsToDelete` a set, the update type an enum.
pub const CLONESET_KEYWORDS: &[SchemaKeyword] = &[
    // The cost bounds of `selector_matches_template_labels` (63 is the label value limit).
    SchemaKeyword {
        path: "spec.selector.matchLabels",
        keyword: "maxProperties",
        value: KeywordValue::Int(64),
    },
    SchemaKeyword {
        path: "spec.selector.matchLabels.*",
        keyword: "maxLength",
        value: KeywordValue::Int(63),
    },
    SchemaKeyword {
        path: "spec.template.metadata.labels.*",
        keyword: "maxLength",
        value: KeywordValue::Int(63),
    },
];

/// CEL rules of ImagePullJob, after the reference's validating webhook (OpenKruise
/// `pkg/webhook/imagepulljob/validating/`).
pub const IMAGEPULLJOB_RULES: &[CelRule] = &[
    CelRule {
        id: "parallelism_integer",
        path: "spec.parallelism",
        rule: "type(self) == int && self >= 0",
        message: "parallelism must be an integer >= 0 (percentages are not supported)",
    },
    CelRule {
        id: "selector_names_or_labels",
        path: "spec.selector",
        rule: "!(has(self.names) && size(self.names) > 0 && (has(self.matchLabels) || has(self.matchExpressions)))",
        message: "selector.names and selector.matchLabels/matchExpressions are mutually exclusive",
    },
    CelRule {
        id: "selector_expression_valid",
        path: "spec.selector.matchExpressions[]",
        rule: SELECTOR_EXPRESSION_RULE,
        message: SELECTOR_EXPRESSION_MESSAGE,
    },
    CelRule {
        id: "pod_selector_expression_valid",
        path: "spec.podSelector.matchExpressions[]",
        rule: SELECTOR_EXPRESSION_RULE,
        message: SELECTOR_EXPRESSION_MESSAGE,
    },
    CelRule {
        id: "selector_or_pod_selector",
        path: "spec",
        rule: "!(has(self.selector) && has(self.podSelector))",
        message: "selector and podSelector are mutually exclusive",
    },
    CelRule {
        id: "deadline_and_ttl_only_with_always",
        path: "spec.completionPolicy",
        rule: "!has(self.type) || self.type == 'Always' || (!has(self.activeDeadlineSeconds) && !has(self.ttlSecondsAfterFinished))",
        message: "activeDeadlineSeconds and ttlSecondsAfterFinished are only allowed with completionPolicy.type Always",
    },
    CelRule {
        id: "active_deadline_exceeds_pull_timeout",
        path: "spec",
        rule: "!has(self.completionPolicy) || !has(self.completionPolicy.activeDeadlineSeconds) || self.completionPolicy.activeDeadlineSeconds > ((has(self.pullPolicy) && has(self.pullPolicy.timeoutSeconds)) ? self.pullPolicy.timeoutSeconds : 600)",
        message: "completionPolicy.activeDeadlineSeconds must be greater than pullPolicy.timeoutSeconds (default 600)",
    },
];

/// Schema keywords of ImagePullJob beyond the derived ones (image non-empty, names a set,
/// enums).
pub const IMAGEPULLJOB_KEYWORDS: &[SchemaKeyword] = &[];

/// CEL rules of ImageListPullJob, after the reference's validating webhook
/// (`pkg/webhook/imagelistpulljob/validating/`): its template checks are ImagePullJob's,
/// at the same paths. The list's own (1–255 unique images) are schema keywords of the
/// derived type. `active_deadline_exceeds_pull_timeout` is not in the list webhook, but the
/// jobs it creates are refused without it; it is checked here, where the user sees it.
pub const IMAGELISTPULLJOB_RULES: &[CelRule] = IMAGEPULLJOB_RULES;

/// Schema keywords of ImageListPullJob beyond the derived ones (images a set of 1–255).
pub const IMAGELISTPULLJOB_KEYWORDS: &[SchemaKeyword] = &[];

/// CEL rules of NodeImage: none; it is written by the controller and the daemons only.
pub const NODEIMAGE_RULES: &[CelRule] = &[];
/// Schema keywords of NodeImage beyond the derived ones (tags keyed by tag, progress
/// 0–100, phase enum).
pub const NODEIMAGE_KEYWORDS: &[SchemaKeyword] = &[];

/// CEL rules of ContainerRecreateRequest (after OpenKruise's admission of CRRs,
/// `pkg/webhook/containerrecreaterequest/`).
///
/// The spec is immutable once it has been filled in: the controller writes every
/// container's `statusContext` (and `strategy.terminationGracePeriodSeconds` from the pod)
/// in one update, as the reference's mutating webhook does on create; from then on nothing
/// may change. The first container stands for all (`containers` has at least one item), so
/// the rule does not iterate the list (see the cost notes above).
pub const CRR_RULES: &[CelRule] = &[CelRule {
    id: "spec_immutable",
    path: "spec",
    rule: "!has(oldSelf.containers) || size(oldSelf.containers) == 0 || !has(oldSelf.containers[0].statusContext) || self == oldSelf",
    message: "spec is immutable once filled in (statusContext set)",
}];
/// Schema keywords of ContainerRecreateRequest beyond the derived ones (containers
/// non-empty and keyed by name, activeDeadlineSeconds ≥ 3, failurePolicy enum).
pub const CRR_KEYWORDS: &[SchemaKeyword] = &[];
