//! Kubernetes resource quantities (`"500m"`, `"1.5Gi"`, `"2e3"`), the one implementation
//! the controller (in-place resize eligibility, resize completion) and the daemon (the
//! kubelet's cgroup conversion) share. The text is parsed by `kube_quantity`.
//!
//! `kube_quantity` reads the number through an `f64`, so a value with more than about 15
//! significant digits is known only to that precision.

use std::cmp::Ordering;
use std::str::FromStr;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube_quantity::ParsedQuantity;
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::{Decimal, RoundingStrategy};

/// The value of a quantity in its unit (`"1.5Gi"` → 1610612736). `None` when the text is
/// not a quantity or its value does not fit.
pub fn value(text: &str) -> Option<Decimal> {
    let text = text.trim();
    // kube_quantity reads a suffix without a number (`m`, `Ki`, `-`) as zero; Kubernetes
    // refuses it.
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    if !unsigned.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return None;
    }
    // kube_quantity 0.9 takes the `E` of `1E` and `5Ei` for an exponent and fails: those
    // two suffixes are read as `P` and `Pi`, and scaled once more below.
    let (parsed, exa) = match (text.strip_suffix("Ei"), text.strip_suffix('E')) {
        (Some(n), _) => (ParsedQuantity::try_from(format!("{n}Pi")), 1024),
        (None, Some(n)) => (ParsedQuantity::try_from(format!("{n}P")), 1000),
        (None, None) => (ParsedQuantity::try_from(text), 1),
    };
    // A ParsedQuantity shows its number and suffix only through Display: `1.5Gi`, `250m`.
    let shown = parsed.ok()?.to_string();
    let number_end = shown
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
        .unwrap_or(shown.len());
    let (number, suffix) = shown.split_at(number_end);
    let number = Decimal::from_str(number).ok()?;
    let (binary, decimal): (u32, i32) = match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        _ => return None,
    };
    let scaled = number
        .checked_mul(Decimal::from(exa))?
        .checked_mul(Decimal::from(1u64.checked_shl(binary)?))?;
    if decimal >= 0 {
        scaled.checked_mul(Decimal::from(10u64.checked_pow(decimal.unsigned_abs())?))
    } else {
        scaled.checked_div(Decimal::from(10u64.checked_pow(decimal.unsigned_abs())?))
    }
}

/// `value` rounded away from zero to a whole number.
fn whole(value: Decimal) -> Option<i128> {
    value
        .round_dp_with_strategy(0, RoundingStrategy::AwayFromZero)
        .to_i128()
}

/// The value of a quantity in thousandths of its unit, rounded up (like Kubernetes'
/// `MilliValue`). `None` when the text is not a quantity or does not fit.
pub fn millis(text: &str) -> Option<i128> {
    whole(value(text)?.checked_mul(Decimal::from(1000))?)
}

/// The value of a quantity in its unit, rounded up (like Kubernetes' `Value`).
pub fn units(text: &str) -> Option<i128> {
    whole(value(text)?)
}

/// Compares two quantities by value in thousandths (as Kubernetes compares resources);
/// unparsable ones compare by text (and never equal a parsable one), so that a malformed
/// quantity is never taken for an unchanged one.
pub fn cmp(a: &Quantity, b: &Quantity) -> Ordering {
    match (millis(&a.0), millis(&b.0)) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.0.cmp(&b.0),
    }
}

/// Same value.
pub fn equal(a: &Quantity, b: &Quantity) -> bool {
    cmp(a, b) == Ordering::Equal
}

/// Strictly positive (what Kubernetes counts when deriving the QoS class).
pub fn is_positive(q: &Quantity) -> bool {
    millis(&q.0).is_some_and(|m| m > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_suffix_and_exponent_form_scales_exactly() {
        let cases = [
            ("1", Some(1000)),
            ("500m", Some(500)),
            ("0.5", Some(500)),
            (".5", Some(500)),
            ("+2", Some(2000)),
            ("-250m", Some(-250)),
            ("1n", Some(1)), // rounded up like MilliValue
            ("1500u", Some(2)),
            ("1k", Some(1_000_000)),
            ("1.5k", Some(1_500_000)),
            ("2M", Some(2_000_000_000)),
            ("1G", Some(1_000_000_000_000)),
            ("1T", Some(1_000_000_000_000_000)),
            ("1P", Some(1_000_000_000_000_000_000)),
            ("1E", Some(1_000_000_000_000_000_000_000)),
            ("1.5E", Some(1_500_000_000_000_000_000_000)),
            ("1Ki", Some(1_024_000)),
            ("1.5Mi", Some(1_572_864_000)),
            ("1Gi", Some(1_073_741_824_000)),
            ("1Ti", Some(1_099_511_627_776_000)),
            ("1Pi", Some(1_125_899_906_842_624_000)),
            ("1Ei", Some(1_152_921_504_606_846_976_000)),
            ("2Ei", Some(2_305_843_009_213_693_952_000)),
            ("2e3", Some(2_000_000)),
            ("1E-3", Some(1)),
            ("1.5e2", Some(150_000)),
            ("1e", None),
            ("E", None),
            ("", None),
            ("m", None),
            ("Ki", None),
            ("-", None),
            ("abc", None),
            ("1Xi", None),
            ("1.2.3", None),
            ("1 Gi", None),
        ];
        for (text, want) in cases {
            assert_eq!(millis(text), want, "{text}");
        }
    }

    #[test]
    fn units_round_up() {
        assert_eq!(units("1500m"), Some(2));
        assert_eq!(units("128Mi"), Some(134_217_728));
        assert_eq!(units("-1500m"), Some(-2));
        assert_eq!(units("x"), None);
    }

    #[test]
    fn notations_of_one_value_compare_equal() {
        let q = |s: &str| Quantity(s.to_owned());
        assert!(equal(&q("1"), &q("1000m")));
        assert!(equal(&q("1Gi"), &q("1024Mi")));
        assert!(equal(&q("1k"), &q("1e3")));
        assert!(!equal(&q("1G"), &q("1Gi")));
        assert!(!equal(&q("bogus"), &q("1")));
        assert_eq!(cmp(&q("1Gi"), &q("1G")), Ordering::Greater);
        assert_eq!(cmp(&q("bogus"), &q("1")), Ordering::Greater);
        assert!(is_positive(&q("1n")));
        assert!(!is_positive(&q("0")));
        assert!(!is_positive(&q("-1")));
    }
}
