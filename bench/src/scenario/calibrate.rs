//! Owns: turning `--slow-fraction F` into a slow rate — "one consumer at 10 % of the
//! publishers' maximum rate" — by first running the scenario's calibration plan
//! (same publishers, nobody throttled) for `--calibrate` seconds and taking F times
//! the publish rate it measured. A fixed `--rate` needs no calibration run.
//! Does not: keep anything of the calibration run but its publish rate.

use tokio::sync::watch;

use super::{execute, Opts, Plan};
use crate::broker::BrokerUnderTest;
use crate::report::Calibration;

/// The calibration of a run whose slow subscribers take `fraction` of the
/// publishers' maximum rate; `plan` is the scenario with no one throttled.
pub async fn calibrate(
    scenario: &str,
    broker: &BrokerUnderTest,
    opts: &Opts,
    fraction: f64,
    plan: Plan,
    interrupted: &watch::Receiver<bool>,
) -> Result<Calibration, String> {
    let to_rate = |publish_rate: f64| -> u32 {
        let r = (fraction * publish_rate).round();
        if r >= f64::from(u32::MAX) {
            u32::MAX
        } else {
            (r as u32).max(1)
        }
    };
    if opts.rate > 0 {
        let rate = opts.rate as f64 * opts.publishers as f64;
        return Ok(Calibration {
            window_s: 0.0,
            publish_rate: rate,
            fraction,
            slow_rate: to_rate(rate),
        });
    }
    let mut o = opts.clone();
    o.duration_s = opts.calibrate_s;
    o.warmup_s = (opts.calibrate_s / 2.0).min(1.0);
    o.slow = 0;
    if !opts.quiet {
        eprintln!(
            "calibrating: {} publisher(s) at their maximum rate for {:.1} s, nobody throttled",
            o.publishers, o.duration_s
        );
    }
    let r = execute(
        &format!("{scenario}-calibration"),
        broker,
        &o,
        plan,
        interrupted,
    )
    .await?;
    if r.publish_rate <= 0.0 {
        return Err("calibration published nothing; give --slow-rate instead".into());
    }
    Ok(Calibration {
        window_s: r.window_s,
        publish_rate: r.publish_rate,
        fraction,
        slow_rate: to_rate(r.publish_rate),
    })
}
