"""Typed configuration schemas: one pydantic model per shipped scenario.

A scenario's configuration (``scenarios/configs/<name>.toml`` after ``--config``/``--set``/
``--duration``) is checked against its model before anything is built or simulated: types (strict:
no string for a number, no bool for an int; an int is accepted for a float), finiteness (NaN and inf
are refused everywhere), signs and ranges, list lengths, choices, and that model files exist.
:func:`validate` turns the first problems into one line per problem, each naming the key, the
allowed range and the value, e.g. ``task_kp must be a finite number > 0, got nan``.

Durations are finite, > 0 and at most ``MAX_DURATION_S``; time steps are > 0 and at most 1 s.
Gains that multiply an error (kp, λ, K) are > 0; damping-like gains, noise and limits are >= 0.
"""

from __future__ import annotations

import math
import typing
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from cmstack.models.errors import ConfigError

#: longest accepted simulated duration (s): 11.6 days; a longer run is a typo, not an experiment
MAX_DURATION_S = 1e6


# ------------------------------------------------------------------------------------- field types
def _bounds_text(gt=None, ge=None, lt=None, le=None) -> str:
    lo = f"> {gt:g}" if gt is not None else f">= {ge:g}" if ge is not None else ""
    hi = f"< {lt:g}" if lt is not None else f"<= {le:g}" if le is not None else ""
    if lo and hi:
        a = "(" if gt is not None else "["
        b = ")" if lt is not None else "]"
        return f" in {a}{gt if gt is not None else ge:g}, {lt if lt is not None else le:g}{b}"
    return f" {lo or hi}" if (lo or hi) else ""


def num(what: str = "number", *, gt=None, ge=None, lt=None, le=None, unit: str = ""):
    """A finite float with optional bounds; its description is the allowed range in words."""
    desc = f"a finite {what}{_bounds_text(gt, ge, lt, le)}{(' ' + unit) if unit else ''}"
    return Annotated[float, Field(allow_inf_nan=False, gt=gt, ge=ge, lt=lt, le=le, description=desc)]


def integer(*, ge=None, le=None):
    return Annotated[int, Field(ge=ge, le=le, description=f"an integer{_bounds_text(ge=ge, le=le)}")]


def vec(n: int | None, what: str = "finite numbers", *, gt=None, ge=None, min_len: int = 0):
    """A list of ``n`` (or any number >= ``min_len`` if n is None) finite floats with the bounds."""
    elem = Annotated[float, Field(allow_inf_nan=False, gt=gt, ge=ge)]
    count = f"{n} " if n is not None else ""
    desc = f"a list of {count}{what}{_bounds_text(gt, ge)}"
    item = {"item": f"a finite number{_bounds_text(gt, ge)}"}
    if n is None:
        return Annotated[list[elem], Field(min_length=min_len, description=desc, json_schema_extra=item)]
    return Annotated[list[elem], Field(min_length=n, max_length=n, description=desc, json_schema_extra=item)]


def _file_exists(kind: str):
    def check(p: str) -> str:
        from cmstack.models.robot import resolve_asset

        if not resolve_asset(p).is_file():
            raise ValueError(f"no such {kind} file")
        return p

    return check


def asset(kind: str):
    """A path to a model file that exists (relative to the current directory or the package)."""
    return Annotated[
        str,
        Field(
            min_length=1,
            description=f"an existing {kind} file (path relative to the current directory or the package)",
        ),
        AfterValidator(_file_exists(kind)),
    ]


def optional_file(kind: str):
    """'' (none) or a path to a ``kind`` file that exists (relative to the current directory or the package)."""
    exists = _file_exists(kind)
    return Annotated[
        str,
        Field(description=f"'' or an existing {kind} file"),
        AfterValidator(lambda p: exists(p) if p else p),
    ]


Name = Annotated[str, Field(min_length=1, description="a non-empty name")]
Text = Annotated[str, Field(description="a string")]
Bool = Annotated[bool, Field(description="true or false")]
Duration = num("duration", gt=0, le=MAX_DURATION_S, unit="s")
Window = num("duration", ge=0, le=MAX_DURATION_S, unit="s")
Step = num("time step", gt=0, le=1.0, unit="s")
StepOrZero = num("time step", ge=0, le=1.0, unit="s (0 = the control step)")
Pos = num(gt=0)
NonNeg = num(ge=0)
Finite = num()
Vec3 = vec(3)
Mat3 = Annotated[
    list[vec(3)],
    Field(
        min_length=3,
        max_length=3,
        description="a 3×3 matrix of finite numbers (3 rows of 3)",
        json_schema_extra={"item": "a row of 3 finite numbers", "elem": "a finite number"},
    ),
]
Seed = integer(ge=0)
MujocoIntegrator = Literal["euler", "rk4", "implicit", "implicitfast"]


class _Table(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow", frozen=True)


class Perturbation(_Table):
    """The ``[perturbation]`` table every scenario accepts (sim/perturb.py checks the combinations)."""

    mass_rel: num(ge=0, lt=1)
    inertia_rel: num(ge=0, lt=1)
    com_shift_m: num(ge=0, unit="m")
    bodies: Annotated[
        list[Name], Field(description="a list of body names", json_schema_extra={"item": "a body name"})
    ]
    noise_q: NonNeg
    noise_v: NonNeg
    delay_steps: integer(ge=0)
    torque_limit_fraction: NonNeg
    wrench_body: Text
    wrench_force: Vec3
    wrench_moment: Vec3
    wrench_t0: Window
    wrench_t1: Window


class Schema(BaseModel):
    """Base of the scenario schemas: strict types.  A key the user adds is refused before this
    (``--set``/``--config`` may only change keys of the default TOML, and the error suggests the
    closest); a key of the default TOML that a schema does not list yet is let through if it is not
    a non-finite number (tests/test_bad_inputs.py checks that every default key is typed)."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)

    perturbation: Perturbation | None = None

    @model_validator(mode="after")
    def _untyped_keys_finite(self):
        for k, v in (self.model_extra or {}).items():
            for x in v if isinstance(v, list) else [v]:
                if isinstance(x, float) and not math.isfinite(x):
                    raise ValueError(f"{k} must be finite, got {_show(x)}")
        return self


# ------------------------------------------------------------------------------------- yumi_dual_arm
class YumiDualArm(Schema):
    duration: Duration
    controller: Name
    priority: Literal["weighted", "strict"]
    plant: Literal["virtual", "bar"]
    control_dt: Step
    sim_dt: StepOrZero
    integrator: MujocoIntegrator
    urdf: asset("URDF")
    mjcf_virtual: asset("MJCF")
    mjcf_bar: asset("MJCF")
    frame1: Name
    frame2: Name
    T_AB_rotation: Mat3
    T_AB_translation: Vec3
    coupling_rows: Literal["full", "position", "orientation"]
    constraint_kp: Pos
    constraint_kd: NonNeg
    task_kp: Pos
    task_kd: NonNeg
    omega: Pos
    torque_limits: Bool
    squeeze_force: Finite
    force_kp: NonNeg
    force_ki: NonNeg
    pidc_null_damping: NonNeg
    model_damping: Bool
    robust_ki: num(ge=0, unit="1/s³")
    robust_z_max: num(gt=0)
    robust_v_filter_hz: num(ge=0, unit="Hz (0 = off)")
    robust_q_filter_hz: num(ge=0, unit="Hz (0 = off)")
    robust_task_ki: num(ge=0, unit="1/s³ (0 = off)")
    robust_task_z_max: num(gt=0)
    traj_center: Vec3
    traj_radius: NonNeg
    traj_omega: Finite
    traj_phase: Finite
    q0_joints: Annotated[
        list[Name],
        Field(
            min_length=1,
            description="a non-empty list of joint names",
            json_schema_extra={"item": "a non-empty joint name"},
        ),
    ]
    q0: vec(None, min_len=1)
    converge_after: Window
    settle_threshold: Pos
    noise_q: NonNeg
    noise_v: NonNeg
    seed: Seed
    disturbance_body: Text
    disturbance_t0: Window
    disturbance_t1: Window
    disturbance_force: Vec3
    disturbance_moment: Vec3

    @model_validator(mode="after")
    def _consistent(self):
        if len(self.q0) != len(self.q0_joints):
            raise ValueError(f"q0 has {len(self.q0)} values but q0_joints names {len(self.q0_joints)} joints")
        R = self.T_AB_rotation
        for i in range(3):
            for j in range(3):
                dot = sum(R[k][i] * R[k][j] for k in range(3))
                if abs(dot - (i == j)) > 1e-9:
                    raise ValueError(f"T_AB_rotation must be a rotation matrix (RᵀR = I), got {R}")
        if self.disturbance_t1 < self.disturbance_t0:
            raise ValueError(
                f"disturbance_t1 must be >= disturbance_t0 = {self.disturbance_t0:g} s, "
                f"got {self.disturbance_t1:g}"
            )
        return self


# ------------------------------------------------------------------------------------- series_parallel
class SeriesParallel(Schema):
    duration: Duration
    controller: Name
    control_dt: Step
    sim_dt: StepOrZero
    integrator: MujocoIntegrator
    urdf: asset("URDF")
    mjcf: asset("MJCF")
    model_actuator_bodies: Bool
    model_terms: Literal["rnea", "partition"]
    qacc_check_every: integer(ge=1)
    L0: Pos
    l0: Pos
    delta_range: vec(2)
    stroke_slack_m: NonNeg
    Lambda: vec(3, gt=0)
    K: vec(3, gt=0)
    kappa: vec(3, ge=0)
    eps: vec(3, gt=0)
    pidc_kp: vec(3, gt=0)
    pidc_kv: vec(3, ge=0)
    traj_center: Vec3
    traj_amplitude: Vec3
    traj_frequency_hz: vec(3, ge=0)
    traj_phase: Vec3
    initial_error: Vec3
    disturbance_force_n: Finite
    disturbance_t0: Window
    disturbance_t1: Window
    steady_after: Window
    disturbance_window: vec(2, ge=0)
    recovery_band: vec(3, gt=0)
    noise_q: NonNeg
    noise_v: NonNeg
    seed: Seed

    @model_validator(mode="after")
    def _consistent(self):
        lo, hi = self.delta_range
        if not lo < hi:
            raise ValueError(f"delta_range must be [min, max] with min < max, got {self.delta_range}")
        if self.disturbance_t1 < self.disturbance_t0:
            raise ValueError(
                f"disturbance_t1 must be >= disturbance_t0 = {self.disturbance_t0:g} s, "
                f"got {self.disturbance_t1:g}"
            )
        if self.disturbance_window[1] < self.disturbance_window[0]:
            raise ValueError(
                f"disturbance_window must be [t0, t1] with t0 <= t1, got {self.disturbance_window}"
            )
        return self


# ------------------------------------------------------------------------------------- slider_crank
class SliderCrank(Schema):
    duration: Duration
    controller: Name
    control_dt: Step
    sim_dt_mujoco: Step
    sim_dt_projection: Step
    formulation: Literal["23", "28", "29"]
    urdf: asset("URDF")
    mjcf: asset("MJCF")
    loops: asset("loops TOML")
    rank_tol_sim: Pos
    rank_tol_controller: Pos
    nr_tol: Pos
    kp: Pos
    kv: Pos
    crank_speed: Finite
    spinup_time: Pos
    crank_torque_limit: Pos
    track_after: Window
    compare_duration: Duration
    energy_duration: Duration
    energy_crank_speed: Finite


# ------------------------------------------------------------------------------------- closed_chain
class ClosedChain(Schema):
    model: asset("model")
    loops: optional_file("loops TOML")
    plant_mjcf: optional_file("MJCF")
    law: Literal["pidc", "uk"]
    duration: Duration
    control_dt: Step
    sim_dt: Step
    track_after: Window
    coords: Literal["auto", "ee", "joints"]
    ee_frame: Name
    ee_rows: Literal["position", "full"]
    radius: Pos
    frequency: Pos
    joint_amplitude: NonNeg
    kp: Pos
    kd: Pos
    check_states: integer(ge=0, le=10000)
    sensors: Literal["full", "actuated"]
    encoder_counts: NonNeg
    encoder_noise_q: NonNeg
    encoder_noise_v: NonNeg
    command: Literal["torque", "position"]
    pd_hz: Pos
    fault_encoder: str
    fault_t: NonNeg
    fault_kind: Literal["jump", "dead"]
    fault_size: Finite


# ------------------------------------------------------------------------------------- legged
class Legged(Schema):
    model: asset("model")
    plant_mjcf: optional_file("MJCF")
    feet: Annotated[
        list[Name],
        Field(min_length=1, description="a list of frame names", json_schema_extra={"item": "a frame"}),
    ]
    base_frame: Name
    duration: Duration
    control_dt: Step
    sim_dt: Step
    mu: Pos
    facets: integer(ge=3, le=64)
    stand_s: Window
    circle_radius: NonNeg
    circle_frequency: Pos
    circle_cycles: integer(ge=0, le=1000)
    circle_ramp_s: Pos
    circle_plane: Literal["xz", "xy"]
    push_t: Window
    push_duration: Window
    push_force: Vec3
    lift_foot: str
    lift_t: Window
    lift_shift: Vec3
    shift_s: Duration
    lift_height: NonNeg
    lift_s: Duration
    base_kp: Pos
    base_kd: Pos
    com_kp: Pos
    com_kd: Pos
    swing_kp: Pos
    swing_kd: Pos
    posture_kp: Pos
    posture_kd: Pos
    fell_height: NonNeg
    fell_tilt: Pos
    check_random_states: integer(ge=0, le=10000)
    check_seed: integer(ge=0)
    check_states: integer(ge=0, le=10000)
    sensors: Literal["full", "actuated"]
    encoder_counts: NonNeg
    command: Literal["torque", "position"]
    pd_hz: Pos
    law: Literal["uk", "pidc"]


# ------------------------------------------------------------------------------------- balloon
class _BalloonBody(_Table):
    mass: Pos
    inertia: Mat3
    CB: Vec3


class _Slider(_Table):
    mass: Pos
    axis: Vec3
    p0: Finite
    stiffness: NonNeg
    damping: NonNeg


class _Pendulum(_Table):
    mass: Pos
    SP: Vec3
    theta0_deg: Finite
    damping: NonNeg


class Balloon(Schema):
    duration: Duration
    engine: Literal["titop", "pinocchio", "mujoco"]
    dt: Step
    log_dt: Step
    compare_pinocchio_duration: Duration
    compare_mujoco_duration: Duration
    energy_duration: Duration
    perturbation_rad: NonNeg
    random_states: integer(ge=1, le=100000)
    seed: Seed
    urdf: asset("URDF")
    mjcf: asset("MJCF")
    gravity: Vec3
    buoyancy: Bool
    balloon: _BalloonBody
    slider: _Slider
    pendulum1: _Pendulum
    pendulum2: _Pendulum


# ------------------------------------------------------------------------------------- chains
class _Pulse(_Table):
    body: integer(ge=1)
    t0: Window
    t1: Window


class _MomentPulse(_Pulse):
    moment: Vec3


class _ForcePulse(_Pulse):
    force: Vec3


class ChainOpenLoop(Schema):
    duration: Duration
    dt: Step
    method: Literal["kkt", "schur"]
    project: Bool
    log_every: integer(ge=1)
    n_bodies: integer(ge=2, le=1000)
    length: Pos
    radius: Pos
    mass: Pos
    stiffness: vec(3, ge=0)
    spring_law: Literal["euler123", "rotvec"]
    gravity: Vec3
    gravity_compensated: Bool
    mjcf: asset("MJCF")
    compare_duration: Duration
    moment_pulse: _MomentPulse
    force_pulse: _ForcePulse


class ChainTaskSpace(Schema):
    duration: Duration
    control_dt: Step
    sim_dt: Step
    rhs: Literal["thrusters", "joint"]
    mjcf: asset("MJCF")
    mjcf_fixed: asset("MJCF")
    motor_limit: NonNeg
    n_bodies: integer(ge=2, le=1000)
    length: Pos
    radius: Pos
    mass: Pos
    stiffness: vec(3, ge=0)
    gravity: Vec3
    model_spring_law: Literal["rotvec", "euler123"]
    initial_bend_rad: vec(None)
    kd_mass: NonNeg
    kd_v: NonNeg
    kd_w: NonNeg
    lam_p: Pos
    lam_a: Pos
    reference_qp: Bool
    joint_rate_limit: NonNeg
    ee_offset: Vec3
    amp_y: Finite
    amp_z: Finite
    omega: Finite
    att_amp: Finite
    att_axis: Vec3
    obstacle_points_per_body: integer(ge=1)
    obstacle_centers: Annotated[
        list[Vec3],
        Field(
            description="a list of 3-vectors of finite numbers",
            json_schema_extra={"item": "a list of 3 finite numbers", "elem": "a finite number"},
        ),
    ]
    obstacle_radii: vec(None, gt=0)
    obstacle_gain: NonNeg
    obstacle_range: Pos
    obstacle_clip: num(gt=0, unit="m")
    disturbances: Annotated[
        list[vec(9)],
        Field(
            description="a list of [body, t0, t1, fx, fy, fz, mx, my, mz] rows of finite numbers",
            json_schema_extra={
                "item": "a row [body, t0, t1, fx, fy, fz, mx, my, mz] of 9 finite numbers",
                "elem": "a finite number",
            },
        ),
    ]
    metrics_from: num(ge=0, lt=1)

    @model_validator(mode="after")
    def _clip_inside_range(self):
        if not self.obstacle_clip < self.obstacle_range:
            raise ValueError(
                f"obstacle_clip must be < obstacle_range = {self.obstacle_range:g} m, "
                f"got {self.obstacle_clip:g}"
            )
        return self


#: the schema of each shipped scenario
SCHEMAS: dict[str, type[Schema]] = {
    "yumi_dual_arm": YumiDualArm,
    "series_parallel": SeriesParallel,
    "slider_crank": SliderCrank,
    "closed_chain": ClosedChain,
    "legged": Legged,
    "balloon": Balloon,
    "chain_open_loop": ChainOpenLoop,
    "chain_task_space": ChainTaskSpace,
}


# ------------------------------------------------------------------------------------- validation
def _show(x: Any) -> str:
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return f"{x:g}"
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, str):
        return repr(x)
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(_show(v) for v in x) + "]"
    return repr(x)


def _field(model: type[BaseModel], loc: tuple):
    """(dotted key, FieldInfo, how many loc items were used) of the deepest named field in loc."""
    keys, desc, used = [], None, 0
    cur = model
    for i, part in enumerate(loc):
        if not isinstance(part, str) or cur is None or part not in cur.model_fields:
            break
        f = cur.model_fields[part]
        keys.append(part)
        desc, used = f, i + 1
        cands = (f.annotation,) + typing.get_args(f.annotation)  # X or Optional[X]
        cur = next((a for a in cands if isinstance(a, type) and issubclass(a, BaseModel)), None)
    return ".".join(keys), desc, used


def _message(model: type[BaseModel], err: dict) -> str:
    loc, typ = tuple(err["loc"]), err["type"]
    if typ == "extra_forbidden":
        return f"unknown config key '{'.'.join(str(p) for p in loc)}'"
    key, info, used = _field(model, loc)
    if not key:  # a check across keys (model validator)
        return err["msg"].removeprefix("Value error, ")
    if typ == "missing":
        return f"config key '{'.'.join(str(p) for p in loc)}' is missing"
    desc = info.description
    idx = [p for p in loc[used:] if isinstance(p, int)]
    if idx:  # an entry of a list (or of a row of a matrix)
        extra = info.json_schema_extra or {}
        item = extra.get("item", "a valid entry")
        desc = extra.get("elem", item) if len(idx) > 1 else item
    if typ == "literal_error":
        desc = f"one of {err['ctx']['expected'].replace(' or ', ', ')}"
    where = "".join(f"[{p}]" for p in idx)
    got = _show(err["input"])
    if typ == "value_error":  # e.g. a model file that does not exist
        return f"{key}{where} must be {desc}, got {got} ({err['msg'].removeprefix('Value error, ')})"
    return f"{key}{where} must be {desc}, got {got}"


def _check_untyped(cfg: dict, prefix: str = "") -> None:
    """The floor for a configuration without a schema (a scenario of your own): no NaN or inf
    anywhere, and a ``duration``, if any, in (0, MAX_DURATION_S]."""
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            _check_untyped(v, f"{key}.")
            continue
        flat = v if isinstance(v, list) else [v]
        while any(isinstance(x, list) for x in flat):
            flat = [y for x in flat for y in (x if isinstance(x, list) else [x])]
        for x in flat:
            if isinstance(x, float) and not math.isfinite(x):
                raise ConfigError(f"{key} must be finite, got {_show(v)}")
        if (
            key == "duration"
            and isinstance(v, (int, float))
            and not isinstance(v, bool)
            and not 0 < v <= MAX_DURATION_S
        ):
            raise ConfigError(
                f"duration must be a finite duration in (0, {MAX_DURATION_S:g}] s, got {_show(v)}"
            )


def validate(name: str, cfg: dict, schema: type[Schema] | None = None) -> dict:
    """Check ``cfg`` against ``schema`` (default: the shipped scenario ``name``'s); return it with
    ints promoted to floats where a float is expected.  Raises ConfigError, one line per problem."""
    schema = schema if schema is not None else SCHEMAS.get(name)
    if schema is None:
        _check_untyped(cfg)
        return cfg
    try:
        return schema.model_validate(cfg).model_dump(exclude_unset=True)
    except ValidationError as exc:
        msgs = list(dict.fromkeys(_message(schema, e) for e in exc.errors()))
        raise ConfigError("; ".join(msgs)) from None
