"""The SAGE budget policy: a RandomForest imitating the oracle's per-question k, with a
temperature on its class probabilities calibrated on a validation split.

Training needs scikit-learn and skl2onnx; a trained policy is a folder with `policy.onnx` (the
forest, exported by skl2onnx: no pickle anywhere) and `policy.json` (classes, feature names,
temperature, decision quantile, SLO, sha256 of the ONNX file). Using a policy needs only
onnxruntime and numpy.

Decision rule (thresher's default): the smallest k whose calibrated cumulative probability
reaches the quantile q. With q = 0.5 this is the median of the predicted budget distribution,
which respects the order of the classes (argmax does not: it can jump from 2 to 30 on a near
tie); the temperature matters because it shapes that cumulative distribution. q is chosen on the
validation split: the highest-quality q whose SLO compliance reaches the target.

CONFIGS["paper"] is SAGE's own configuration: 100 trees of depth 10, argmax of the calibrated
probabilities (the temperature is still fitted, and cannot move an argmax), and the least
SLO-violating k as the oracle label of a question no k serves in time.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from thresher.budget.features import FEATURE_NAMES

POLICY_FORMAT = 1
POLICY_KIND = "sage-budget-policy"
SHIPPED = Path(__file__).resolve().parent / "trained"  # the policy trained on the dev sweep
TEMPERATURES = np.geomspace(0.2, 10.0, 61)
QUANTILES = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
PROB_FLOOR = 1e-4  # forest probabilities are vote fractions, often exactly 0
DECISIONS = ("quantile", "argmax")


@dataclass(frozen=True)
class PolicyConfig:
    """How a policy is trained (forest, oracle fallback) and how it decides."""

    n_estimators: int
    max_depth: int
    decision: str  # "quantile" (smallest k whose CDF reaches q) or "argmax"
    fallback: str  # oracle label when no k meets the SLO: "smallest" or "least-violating"


CONFIGS = {
    # A smaller forest for ~470 training questions, an order-respecting decision, the cheapest
    # k when nothing is in time (benchmarks/RESULTS.md, "SAGE retrieval budget", compares both).
    "thresher": PolicyConfig(64, 6, "quantile", "smallest"),
    "paper": PolicyConfig(100, 10, "argmax", "least-violating"),
}


def calibrate(proba: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(log p / T) row-wise: T > 1 flattens, T < 1 sharpens."""
    z = np.log(np.clip(proba, PROB_FLOOR, 1.0)) / temperature
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def quantile_choice(proba: np.ndarray, classes: np.ndarray, q: float) -> np.ndarray:
    """Per row, the smallest class whose cumulative probability is >= q."""
    cdf = np.cumsum(proba, axis=1)
    return classes[np.argmax(cdf >= q - 1e-9, axis=1)]


class BudgetPolicy:
    """A trained policy folder, run with onnxruntime.

    >>> policy = BudgetPolicy.load()           # the shipped one
    >>> ks = policy.choose(features)           # features: float32 [N, len(FEATURE_NAMES)]
    """

    def __init__(self, directory: str | Path):
        import onnxruntime as ort

        directory = Path(directory)
        meta_path = directory / "policy.json"
        if not meta_path.is_file():
            raise FileNotFoundError(f"{meta_path} is absent: not a budget policy folder")
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("kind") != POLICY_KIND or meta.get("format") != POLICY_FORMAT:
            raise ValueError(f"{meta_path}: kind/format {meta.get('kind')!r}/{meta.get('format')!r} "
                             f"is not {POLICY_KIND!r}/{POLICY_FORMAT}")
        if tuple(meta["feature_names"]) != FEATURE_NAMES:
            raise ValueError(f"{meta_path} was trained on other features: retrain it with this thresher")
        for name, digest in meta["files"].items():
            actual = hashlib.sha256((directory / name).read_bytes()).hexdigest()
            if actual != digest:
                raise ValueError(f"{directory / name} has sha256 {actual}, the manifest says {digest}")
        self.directory = directory
        self.meta = meta
        self.classes = np.array(meta["classes"], np.int64)
        self.ks = tuple(int(k) for k in meta["ks"])  # the budgets swept (classes is a subset)
        self.temperature = float(meta["temperature"])
        self.decision = meta.get("decision", "quantile")  # policies before the paper config: quantile
        if self.decision not in DECISIONS:
            raise ValueError(f"{meta_path}: decision {self.decision!r} is not one of {DECISIONS}")
        self.quantile = None if meta.get("quantile") is None else float(meta["quantile"])
        self.slo_ms = float(meta["slo_ms"])
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # a few hundred small trees: threads cost more than they save
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(directory / "policy.onnx"), options,
                                             providers=["CPUExecutionProvider"])
        self._input = self._session.get_inputs()[0].name

    @classmethod
    def load(cls, directory: str | Path | None = None) -> BudgetPolicy:
        """The policy in `directory`, or the shipped policy trained on the dev sweep."""
        return cls(SHIPPED if directory is None else directory)

    def _features(self, features: np.ndarray) -> np.ndarray:
        x = np.asarray(features, np.float32)
        if x.ndim == 1:
            x = x[None, :]
        if x.ndim != 2 or x.shape[1] != len(FEATURE_NAMES):
            raise ValueError(f"features must be [N, {len(FEATURE_NAMES)}], got {list(np.shape(features))}")
        if not np.isfinite(x).all():
            raise ValueError("features contain NaN or infinity")
        return np.ascontiguousarray(x)

    def proba(self, features: np.ndarray) -> np.ndarray:
        """Calibrated probabilities float64 [N, len(classes)] over `self.classes`."""
        outputs = self._session.run(None, {self._input: self._features(features)})
        return calibrate(np.asarray(outputs[1], np.float64), self.temperature)

    def choose(self, features: np.ndarray, quantile: float | None = None) -> np.ndarray:
        """Budget k per row (int64 [N]), by the policy's decision rule; a `quantile` given here
        applies the quantile rule with it instead."""
        if quantile is None and self.decision == "argmax":
            return self.classes[np.argmax(self.proba(features), axis=1)]
        q = self.quantile if quantile is None else float(quantile)
        if not 0.0 < q <= 1.0:
            raise ValueError(f"quantile must be in (0, 1], got {q}")
        return quantile_choice(self.proba(features), self.classes, q)


@dataclass(frozen=True)
class TrainReport:
    classes: tuple[int, ...]
    temperature: float
    val_nll_raw: float
    val_nll_calibrated: float
    quantile: float | None  # None with the argmax decision
    val_compliance: float
    val_quality: float
    n_train: int
    n_val: int


def _nll(proba: np.ndarray, y_idx: np.ndarray) -> float:
    return float(-np.log(np.clip(proba[np.arange(y_idx.shape[0]), y_idx], 1e-12, 1.0)).mean())


def train(x_train, k_train, x_val, k_val, lat_val, qual_val, ks, slo_ms: float, out_dir: str | Path, *,
          target: float = 0.95, n_estimators: int = 64, max_depth: int = 6, decision: str = "quantile",
          seed: int = 0, config: str | None = None) -> TrainReport:
    """Fit the forest on oracle labels, calibrate the temperature and (quantile decision) choose
    the quantile on the validation split, and write the policy folder. `k_*` are budgets (values
    of `ks`); `lat_val`/`qual_val` are the validation rows' sweep tables [N_val, len(ks)].
    `config` only names the configuration in policy.json."""
    if decision not in DECISIONS:
        raise ValueError(f"decision must be one of {DECISIONS}, got {decision!r}")
    from skl2onnx import to_onnx
    from sklearn.ensemble import RandomForestClassifier

    x_train, x_val = np.asarray(x_train, np.float32), np.asarray(x_val, np.float32)
    k_train, k_val = np.asarray(k_train, np.int64), np.asarray(k_val, np.int64)
    if x_train.shape[0] != k_train.shape[0] or x_val.shape[0] != k_val.shape[0]:
        raise ValueError("features and labels differ in length")
    if x_train.shape[0] < 2 or x_val.shape[0] < 1:
        raise ValueError(f"need >= 2 training and >= 1 validation rows, got {x_train.shape[0]}, {x_val.shape[0]}")
    forest = RandomForestClassifier(n_estimators=n_estimators, max_depth=max_depth, min_samples_leaf=2,
                                    random_state=seed, n_jobs=1)
    forest.fit(x_train, k_train)
    classes = forest.classes_.astype(np.int64)
    raw = forest.predict_proba(x_val)
    # Validation questions whose label the forest never saw cannot enter the NLL.
    seen = np.isin(k_val, classes)
    y_idx = np.searchsorted(classes, k_val[seen])
    nlls = [_nll(calibrate(raw[seen], t), y_idx) for t in TEMPERATURES] if seen.any() else [0.0]
    temperature = float(TEMPERATURES[int(np.argmin(nlls))]) if seen.any() else 1.0
    proba = calibrate(raw, temperature)
    col = {k: i for i, k in enumerate(ks)}
    rows = np.arange(x_val.shape[0])

    def scored(choice: np.ndarray) -> tuple[float, float]:  # validation compliance, quality
        chosen = np.array([col[int(k)] for k in choice])
        return (float((np.asarray(lat_val)[rows, chosen] <= slo_ms).mean()),
                float(np.asarray(qual_val)[rows, chosen].mean()))

    if decision == "argmax":
        quantile, (compliance, quality) = None, scored(classes[np.argmax(proba, axis=1)])
    else:
        best = None
        for q in QUANTILES:
            compliance, quality = scored(quantile_choice(proba, classes, q))
            key = (compliance >= target, quality if compliance >= target else compliance)
            if best is None or key > best[0]:
                best = (key, q, compliance, quality)
        _, quantile, compliance, quality = best

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    onx = to_onnx(forest, x_train[:1], options={id(forest): {"zipmap": False}}, target_opset={"": 17, "ai.onnx.ml": 3})
    (out / "policy.onnx").write_bytes(onx.SerializeToString())
    report = TrainReport(tuple(int(c) for c in classes), temperature, _nll(raw[seen], y_idx) if seen.any() else 0.0,
                         float(min(nlls)), quantile, compliance, quality, int(x_train.shape[0]), int(x_val.shape[0]))
    meta = {
        "format": POLICY_FORMAT, "kind": POLICY_KIND, "classes": list(report.classes), "ks": list(ks),
        "feature_names": list(FEATURE_NAMES), "temperature": temperature, "decision": decision,
        "quantile": quantile, "slo_ms": float(slo_ms), "target_compliance": target, "config": config,
        "forest": {"n_estimators": n_estimators, "max_depth": max_depth, "seed": seed},
        "validation": {"nll_raw": report.val_nll_raw, "nll_calibrated": report.val_nll_calibrated,
                       "compliance": compliance, "quality": quality},
        "n_train": report.n_train, "n_val": report.n_val,
        "files": {"policy.onnx": hashlib.sha256((out / "policy.onnx").read_bytes()).hexdigest()},
    }
    (out / "policy.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return report


def train_from_sweep(rows, slo_ms: float, out_dir: str | Path, config: str = "thresher", **options) -> TrainReport:
    """Label sweep rows with the oracle and train on the train split, calibrating on val, with
    a configuration of CONFIGS ("thresher" or "paper"); options override its forest size or
    decision. Test rows are never used."""
    from thresher.budget.oracle import arrays, oracle_labels

    if config not in CONFIGS:
        raise ValueError(f"config must be one of {tuple(CONFIGS)}, got {config!r}")
    if not rows:
        raise ValueError("no sweep rows to train on")
    settings = asdict(CONFIGS[config])
    fallback = settings.pop("fallback")
    ks = rows[0].ks
    feats, latency, quality = arrays(rows)
    labels = np.asarray(ks)[oracle_labels(latency, quality, slo_ms, fallback)]
    split = np.array([r.split for r in rows])
    tr, va = split == "train", split == "val"
    return train(feats[tr], labels[tr], feats[va], labels[va], latency[va], quality[va], ks, slo_ms,
                 out_dir, config=config, **{**settings, **options})
