//! Cost estimates from the dated price table in `prices.yaml`.
//!
//! Used only where a CLI reports no cost of its own; the result is marked
//! [`Usage::cost_estimated`]. Each token bucket is priced once: [`Usage::input_tokens`] is
//! uncached input, and cache reads and writes have their own prices.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::agent::Usage;

/// USD per million tokens. Cache prices default to the input price.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Uncached input tokens.
    pub input: f64,
    /// Output tokens.
    pub output: f64,
    /// Tokens read from the cache; `None`: the input price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<f64>,
    /// Tokens written to the cache; `None`: the input price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
}

impl Price {
    /// The cost of `usage`, in USD.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let per_token = |tokens: u64, usd_per_million: f64| tokens as f64 * usd_per_million / 1e6;
        per_token(usage.input_tokens, self.input)
            + per_token(usage.output_tokens, self.output)
            + per_token(
                usage.cache_read_tokens,
                self.cache_read.unwrap_or(self.input),
            )
            + per_token(
                usage.cache_write_tokens,
                self.cache_write.unwrap_or(self.input),
            )
    }
}

/// The models deltabench can price when a CLI reports no cost.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceTable {
    /// When the prices were read off the providers' pages.
    pub checked: String,
    /// Each model's price, by bare model name (see [`PriceTable::lookup`]).
    pub models: BTreeMap<String, Price>,
}

/// The table shipped in the binary.
pub fn price_table() -> &'static PriceTable {
    static TABLE: OnceLock<PriceTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        serde_saphyr::from_str(include_str!("prices.yaml")).expect("prices.yaml is valid")
    })
}

impl PriceTable {
    /// The price of `model`, trying it as given, without a `provider/` prefix, and without a
    /// trailing date (`claude-sonnet-4-5-20250929`, `gpt-4.1-2025-04-14`).
    pub fn lookup(&self, model: &str) -> Option<Price> {
        let bare = model.rsplit('/').next().unwrap_or(model);
        [model, bare, strip_date(bare)]
            .into_iter()
            .find_map(|name| self.models.get(name).copied())
    }
}

fn strip_date(model: &str) -> &str {
    let compact = model.len() > 9
        && model.as_bytes()[model.len() - 9] == b'-'
        && model[model.len() - 8..].bytes().all(|b| b.is_ascii_digit());
    if compact {
        return &model[..model.len() - 9];
    }
    let dashed = model.len() > 11
        && model.as_bytes()[model.len() - 11] == b'-'
        && model[model.len() - 10..].bytes().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        });
    if dashed {
        return &model[..model.len() - 11];
    }
    model
}

/// Fills in an estimated cost when `usage` has none: from `override_price`, else the table's
/// price for `model`. Returns whether a price was found.
pub fn estimate(usage: &mut Usage, model: Option<&str>, override_price: Option<Price>) -> bool {
    if usage.cost_usd.is_some() {
        return true;
    }
    let price = override_price.or_else(|| model.and_then(|m| price_table().lookup(m)));
    match price {
        Some(price) => {
            usage.cost_usd = Some(price.cost(usage));
            usage.cost_estimated = true;
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_loads_and_prices_each_bucket_once() {
        let table = price_table();
        assert!(table.checked.starts_with("20"));
        let sonnet = table.lookup("claude-sonnet-4-5").unwrap();
        // 3300 in, 63 out at $3/$15 per MTok: the figure Claude Code itself reported.
        let usage = Usage {
            input_tokens: 3300,
            output_tokens: 63,
            ..Usage::default()
        };
        assert!((sonnet.cost(&usage) - 0.010845).abs() < 1e-12);
        // 1M cached reads at $0.30 plus 1M cache writes at $3.75.
        let cached = Usage {
            cache_read_tokens: 1_000_000,
            cache_write_tokens: 1_000_000,
            ..Usage::default()
        };
        assert!((sonnet.cost(&cached) - 4.05).abs() < 1e-9);
    }

    #[test]
    fn lookup_strips_providers_and_dates() {
        let table = price_table();
        assert!(table.lookup("openai/gpt-5").is_some());
        assert!(table.lookup("claude-sonnet-4-5-20250929").is_some());
        assert!(table.lookup("gpt-4.1-2025-04-14").is_some());
        assert!(table.lookup("gemini/gemini-2.5-pro").is_some());
        assert!(table.lookup("fake-model").is_none());
    }

    #[test]
    fn estimate_keeps_reported_costs_and_marks_its_own() {
        let mut reported = Usage {
            cost_usd: Some(0.5),
            ..Usage::default()
        };
        assert!(estimate(&mut reported, Some("gpt-5"), None));
        assert_eq!(reported.cost_usd, Some(0.5));
        assert!(!reported.cost_estimated);

        let mut usage = Usage {
            input_tokens: 2_000_000,
            output_tokens: 100_000,
            ..Usage::default()
        };
        let price = Price {
            input: 1.0,
            output: 10.0,
            cache_read: None,
            cache_write: None,
        };
        assert!(estimate(&mut usage, Some("fake-model"), Some(price)));
        assert_eq!(usage.cost_usd, Some(3.0));
        assert!(usage.cost_estimated);

        let mut unpriced = Usage::default();
        assert!(!estimate(&mut unpriced, Some("fake-model"), None));
        assert_eq!(unpriced.cost_usd, None);
    }
}
