//! Owns: turning `--slow-fraction F` into a slow rate — "one consumer at 10 % of the
//! publishers' maximum rate" — by first running the scenario's calibration plan
//! (same publishers, nobody throttled) for `--calibrate` seconds and taking F times
//! the publish rate it measured. A fixed `--rate` needs no calibration run.
//! [`execute_calibrated`] runs a scenario's plan after that calibration, when its
//! flags ask for one.
//! Does not: keep anything of the calibration run but its publish rate.

use tokio::sync::watch;

use super::{execute, Opts, Plan};
use crate::broker::BrokerUnderTest;
use crate::report::{Calibration, RunReport};

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

/// Runs `plan_for(opts)`, first calibrating the slow rate when `--slow-fraction`
/// asks for it (`calibration_for` builds the calibration plan), then `before_run`
/// (re-declaring a shared queue empties what the calibration left).
pub async fn execute_calibrated<F>(
    name: &str,
    broker: &BrokerUnderTest,
    opts: &Opts,
    intr: &watch::Receiver<bool>,
    calibration_for: impl Fn(&Opts) -> Plan,
    plan_for: impl Fn(&Opts) -> Plan,
    before_run: impl Fn() -> F,
) -> Result<RunReport, String>
where
    F: std::future::Future<Output = Result<(), String>>,
{
    let mut opts = opts.clone();
    let calibration = match opts.slow_fraction {
        Some(f) => {
            let mut o = opts.clone();
            o.slow = 0;
            let c = calibrate(name, broker, &opts, f, calibration_for(&o), intr).await?;
            opts.slow_rate = c.slow_rate;
            if !opts.quiet {
                eprintln!(
                    "calibrated: {:.0} msg/s published; slow rate {} msg/s. The run:",
                    c.publish_rate, c.slow_rate
                );
            }
            before_run().await?;
            Some(c)
        }
        None => None,
    };
    let mut r = execute(name, broker, &opts, plan_for(&opts), intr).await?;
    if let Some(c) = &calibration {
        r.notes.push(format!(
            "slow rate {} msg/s = {} x the publishers' maximum {:.0} msg/s (calibration run)",
            c.slow_rate, c.fraction, c.publish_rate
        ));
    }
    r.calibration = calibration;
    Ok(r)
}
