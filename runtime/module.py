"""The `torq` VM module: runs Torq dispatches of a compiled .vmfb on the simulator.

Contract:
- A .vmfb compiled for Torq imports `torq.run_i{N}_o{M}`; `TorqModule`
  exports one function per arity, as `torq.contract.module_abi` defines them.
- Each call parses the executable with `parse_executable` (once per constant
  buffer: programs are cached by the buffer's address and length, which are
  stable while the compiled module lives), reads the inputs as numpy arrays,
  runs `Simulator(hw).run(program, inputs)` (its checks and schedule,
  `Simulator.prepare`, once per cached program and device) and returns the
  results as new buffer views on the host device, in the program's host
  dtypes.
- An executable does not know where it is called from: identical dispatches
  share one (the compiler leaves `Program.name` and `Program.source` empty,
  as IREE shares one executable among identical dispatches). The caller
  passes `reset(call_sites)`, the (name, source) of the invoked function's
  NPU dispatches in program order (its dispatch records,
  contract/dispatch_records.py); the k-th call of the invocation is named by
  the k-th site (without sites: the program's own name, or the import's).
- Per-call statistics (`DispatchStats.to_dict()` plus "name",
  "executor": "torq", "hw_spec" (the `--torq-hw` text of the device it ran
  on), "wall_start_us" (host wall time from `reset()` to the call) and
  "sim_wall_us" (host wall time of the call: parsing, simulation, buffer
  copies)) are appended to `last_stats`; the caller clears them with
  `reset()` right before each top-level invocation. With
  `record_timeline = True` each dict also has the simulator's "timeline"
  (per-command start/end cycles and LRAM occupancy).
- `torq.check` (a module compiled with --torq-check-dispatches) appends
  `dispatch_check.compare`'s record of the NPU result and its host copy's to
  `last_checks` (cleared by `reset()` too) and returns the NPU result.
- A failure inside a call is stored in `pending_error` as a `DispatchError`
  (message keeps the loader's / simulator's message) and re-raised into the
  VM, which aborts the invocation. The caller re-raises `pending_error`
  instead of IREE's generic error text.
- The device hardware is `hw` when given; otherwise each program runs on the
  hardware it was compiled for (`Program.hw`).
- `close()` drops every IREE object (VM module, module interface, device);
  it also runs automatically when the object is collected and at interpreter
  exit, so nanobind reports no leaked functions.

This file also holds the element type table shared by `api` and `tools`
(IREE names such as "f32", "bf16", "i8", "ui8", "i1").
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import iree.runtime as rt
import ml_dtypes
import numpy as np

from torq.contract.hw import TorqHw
from torq.contract.module_abi import (
    CHECK_CONVENTION,
    CHECK_EXPORT,
    MAX_INPUTS,
    MAX_RESULTS,
    MODULE_NAME,
    calling_convention,
    export_name,
)

from .errors import DispatchError

# --------------------------------------------------------------------------
# Element types (IREE spelling <-> HAL element type <-> numpy dtype)


@dataclass(frozen=True)
class ElementType:
    name: str  # IREE spelling: f32, bf16, i8, ui8, i1, ...
    hal: rt.HalElementType
    dtype: np.dtype


_ET = rt.HalElementType
ELEMENT_TYPES: dict[str, ElementType] = {
    e.name: e
    for e in [
        ElementType("f64", _ET.FLOAT_64, np.dtype(np.float64)),
        ElementType("f32", _ET.FLOAT_32, np.dtype(np.float32)),
        ElementType("f16", _ET.FLOAT_16, np.dtype(np.float16)),
        ElementType("bf16", _ET.BFLOAT_16, np.dtype(ml_dtypes.bfloat16)),
        ElementType("i64", _ET.INT_64, np.dtype(np.int64)),
        ElementType("i32", _ET.INT_32, np.dtype(np.int32)),
        ElementType("i16", _ET.INT_16, np.dtype(np.int16)),
        ElementType("i8", _ET.INT_8, np.dtype(np.int8)),
        ElementType("si64", _ET.SINT_64, np.dtype(np.int64)),
        ElementType("si32", _ET.SINT_32, np.dtype(np.int32)),
        ElementType("si16", _ET.SINT_16, np.dtype(np.int16)),
        ElementType("si8", _ET.SINT_8, np.dtype(np.int8)),
        ElementType("ui64", _ET.UINT_64, np.dtype(np.uint64)),
        ElementType("ui32", _ET.UINT_32, np.dtype(np.uint32)),
        ElementType("ui16", _ET.UINT_16, np.dtype(np.uint16)),
        ElementType("ui8", _ET.UINT_8, np.dtype(np.uint8)),
        ElementType("i1", _ET.BOOL_8, np.dtype(np.bool_)),
    ]
}
_BY_HAL: dict[int, ElementType] = {}
for _e in ELEMENT_TYPES.values():
    _BY_HAL.setdefault(int(_e.hal), _e)
# numpy dtype -> the signless IREE type a tensor of that dtype has.
_BY_DTYPE: dict[np.dtype, ElementType] = {}
for _n in ["f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "ui64", "ui32", "ui16", "ui8", "i1"]:
    _BY_DTYPE[ELEMENT_TYPES[_n].dtype] = ELEMENT_TYPES[_n]


def element_type_of_hal(hal: Any) -> ElementType:
    """The table entry for a HAL element type (raises KeyError if unsupported)."""
    return _BY_HAL[int(hal)]


def element_type_of_dtype(dtype: Any) -> ElementType:
    """The (signless) element type of a numpy dtype (KeyError if unsupported)."""
    return _BY_DTYPE[np.dtype(dtype)]


def buffer_view_to_numpy(bv: rt.HalBufferView) -> np.ndarray:
    """Copies a host-mappable buffer view into a new numpy array."""
    et = element_type_of_hal(bv.element_type)
    return np.array(bv.map().asarray(list(bv.shape), et.dtype), copy=True)


def numpy_to_buffer_view(device: rt.HalDevice, array: np.ndarray, et: ElementType | None = None) -> rt.HalBufferView:
    """Copies `array` into a new device-local buffer view of element type `et`."""
    et = et or element_type_of_dtype(array.dtype)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)  # (never for 0-d arrays: it would make them 1-d)
    return device.allocator.allocate_buffer_copy(
        memory_type=rt.MemoryType.DEVICE_LOCAL,
        allowed_usage=rt.BufferUsage.DEFAULT,
        device=device,
        buffer=array,
        element_type=et.hal,
    )


# --------------------------------------------------------------------------
# The module


class _State:
    """Everything a call needs; separate from TorqModule so finalizers can own it."""

    def __init__(self, device: rt.HalDevice, hw: TorqHw | None) -> None:
        self.device: rt.HalDevice | None = device
        self.hw = hw
        self.programs: dict[tuple[int, int], Any] = {}
        self.simulators: dict[TorqHw, Any] = {}
        self.plans: dict[tuple[int, TorqHw], Any] = {}  # (id of a cached program, hw) -> Simulator plan
        self.last_stats: list[dict] = []
        self.last_checks: list[dict] = []  # torq.check records (runtime/dispatch_check.py)
        self.call_sites: tuple[tuple[str, str], ...] = ()  # (name, source) per NPU call, in order
        self.record_timeline = False
        self.t0 = time.perf_counter()
        self.pending_error: BaseException | None = None
        self.iface: rt.PyModuleInterface | None = None
        self.vm_module: rt.VmModule | None = None

    def close(self) -> None:
        self.vm_module = None
        self.iface = None
        self.device = None
        self.programs.clear()
        self.simulators.clear()
        self.plans.clear()

    def program(self, blob_ref: rt.VmRef) -> Any:
        from torq.contract.executable import parse_executable

        view = memoryview(blob_ref.deref(rt.VmBuffer))
        raw = np.frombuffer(view, dtype=np.uint8)
        key = (int(raw.ctypes.data) if raw.size else 0, int(raw.size))
        program = self.programs.get(key)
        if program is None:
            program = parse_executable(view, self.hw)
            self.programs[key] = program
        return program

    def simulator(self, program: Any) -> Any:
        from .simulator import Simulator

        hw = self.hw if self.hw is not None else TorqHw.from_dict(program.hw)
        sim = self.simulators.get(hw)
        if sim is None:
            sim = self.simulators[hw] = Simulator(hw)
        return sim

    def plan(self, sim: Any, program: Any) -> Any:
        """The simulator's plan of `program` (checks and schedule), once per program and device."""
        key = (id(program), sim.hw)
        plan = self.plans.get(key)
        if plan is None:
            plan = self.plans[key] = sim.prepare(program)
        return plan

    def run(self, n_results: int, blob_ref: rt.VmRef, arg_refs: tuple[rt.VmRef, ...]) -> Any:
        where = f"{MODULE_NAME}.{export_name(len(arg_refs), n_results)}"
        k = len(self.last_stats)  # this call's index in the invocation: its site
        name, source = self.call_sites[k] if k < len(self.call_sites) else ("", "")
        t_start = time.perf_counter()
        try:
            program = self.program(blob_ref)
            name = name or program.name
            source = source or program.source
            # The simulator only reads its inputs (converting them to their DDR dtype), so it
            # reads the mapped host buffers directly; `mappings` keeps them mapped meanwhile.
            mappings, inputs = [], []
            for r in arg_refs:
                bv = r.deref(rt.HalBufferView)
                mappings.append(bv.map())
                inputs.append(mappings[-1].asarray(list(bv.shape), element_type_of_hal(bv.element_type).dtype))
            outs_desc = program.outputs()
            if len(program.inputs()) != len(inputs) or len(outs_desc) != n_results:
                raise DispatchError(
                    f"dispatch '{name}': executable takes {len(program.inputs())} inputs and gives "
                    f"{len(outs_desc)} results, but was called with {len(inputs)} inputs for {n_results} results",
                    name,
                )
            sim = self.simulator(program)
            plan = self.plan(sim, program)
            outputs, stats = sim.run(program, inputs, record_timeline=self.record_timeline, plan=plan)
            del inputs, mappings
            results = [self._result_view(desc, out) for desc, out in zip(outs_desc, outputs)]
        except DispatchError as e:
            self.pending_error = e
            raise
        except Exception as e:  # loader, simulator, or a bug: report it typed, in one line
            err = self.pending_error = _typed_error(e, f"dispatch '{name}'" if name else where, name)
            # Keep the cause without its traceback: frames would pin IREE objects.
            raise err from e.with_traceback(None)
        t_end = time.perf_counter()
        d = dict(stats.to_dict())
        d["name"] = name or where
        d["source"] = source
        d["executor"] = "torq"
        d["hw_spec"] = sim.hw.spec
        d["wall_start_us"] = (t_start - self.t0) * 1e6
        d["sim_wall_us"] = (t_end - t_start) * 1e6
        self.last_stats.append(d)
        return results[0] if n_results == 1 else tuple(results)

    def _result_view(self, desc, out: np.ndarray) -> rt.VmRef:
        """A simulator output as a HAL buffer view of the result's host element type."""
        et = ELEMENT_TYPES.get(desc.host_dtype) or element_type_of_dtype(out.dtype)
        out = np.asarray(out)
        if out.dtype != et.dtype:
            out = out.astype(et.dtype)
        return numpy_to_buffer_view(self.device, out, et).ref

    def check(self, blob_ref: rt.VmRef, which_ref: rt.VmRef, npu_ref: rt.VmRef, host_ref: rt.VmRef) -> Any:
        """`torq.check`: record how far the NPU result is from its host copy's; return it unchanged."""
        from .dispatch_check import compare

        try:
            # the NPU call just before it, whose result it checks
            name = self.last_stats[-1]["name"] if self.last_stats else self.program(blob_ref).name
            index = int(np.frombuffer(memoryview(which_ref.deref(rt.VmBuffer)), np.int32)[0])
            npu, host = (buffer_view_to_numpy(r.deref(rt.HalBufferView)) for r in (npu_ref, host_ref))
            self.last_checks.append(compare(name, index, npu, host))
        except Exception as e:
            err = DispatchError(f"{MODULE_NAME}.{CHECK_EXPORT}: {type(e).__name__}: {e}", "")
            self.pending_error = err
            raise err from e.with_traceback(None)
        return npu_ref


def _make_export(n_results: int) -> Callable[..., Any]:
    def fn(instance: "_Instance", blob: rt.VmRef, *args: rt.VmRef) -> Any:
        state = instance.state()
        if state is None or state.device is None:
            raise DispatchError("the torq module is closed")
        return state.run(n_results, blob, args)

    return fn


def _check_export(instance: "_Instance", blob: rt.VmRef, which: rt.VmRef, npu: rt.VmRef, host: rt.VmRef) -> Any:
    state = instance.state()
    if state is None or state.device is None:
        raise DispatchError("the torq module is closed")
    return state.check(blob, which, npu, host)


class _Instance:
    """The object the VM constructs per context; it only points at the state."""

    def __init__(self, state: _State) -> None:
        self.state = weakref.ref(state)


class TorqModule:
    """The `torq` VM module bound to a device and a simulator configuration."""

    def __init__(self, config: rt.Config, hw: TorqHw | None = None) -> None:
        self._state = _State(config.device, hw)
        state = self._state
        iface = rt.PyModuleInterface(MODULE_NAME, lambda _iface: _Instance(state))
        for n_in in range(MAX_INPUTS + 1):  # no input: a dispatch that copies a constant
            for n_out in range(1, MAX_RESULTS + 1):
                iface.export(export_name(n_in, n_out), calling_convention(n_in, n_out), _make_export(n_out))
        iface.export(CHECK_EXPORT, CHECK_CONVENTION, _check_export)
        state.iface = iface
        state.vm_module = iface.create()
        self._finalizer = weakref.finalize(self, _State.close, state)

    @property
    def vm_module(self) -> rt.VmModule:
        if self._state.vm_module is None:
            raise DispatchError("the torq module is closed")
        return self._state.vm_module

    @property
    def hw(self) -> TorqHw | None:
        return self._state.hw

    @property
    def last_stats(self) -> list[dict]:
        return self._state.last_stats

    @property
    def last_checks(self) -> list[dict]:
        """The `torq.check` records of the last call (a module compiled with --torq-check-dispatches)."""
        return self._state.last_checks

    @property
    def pending_error(self) -> BaseException | None:
        return self._state.pending_error

    @property
    def record_timeline(self) -> bool:
        return self._state.record_timeline

    @record_timeline.setter
    def record_timeline(self, value: bool) -> None:
        self._state.record_timeline = bool(value)

    def reset(self, call_sites: tuple[tuple[str, str], ...] = ()) -> None:
        """Clears stats and pending error and restarts the wall clock; call right before each
        invocation, with the (name, source) of its NPU dispatches in program order."""
        self._state.call_sites = tuple(call_sites)
        self._state.last_stats.clear()
        self._state.last_checks.clear()
        self._state.pending_error = None
        self._state.t0 = time.perf_counter()

    def close(self) -> None:
        self._finalizer()


def _typed_error(e: Exception, where: str, name: str) -> DispatchError:
    """A loader's, the simulator's or an internal error as one DispatchError line naming `where`."""
    from torq.contract.executable import ExecutableError

    from .simulator import SimulatorError

    if not isinstance(e, (ExecutableError, SimulatorError)):
        return DispatchError(f"{where}: internal error: {type(e).__name__}: {e}", name)
    if name and f"'{name}'" in str(e):
        return DispatchError(str(e), name)  # already names the program
    return DispatchError(f"{where}: {e}", name)
