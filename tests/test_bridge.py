"""The serial bridge (``fpga/bridge.py``) and the board backend (``runtime/board.py``).

- the frame codec (``fpga/serial_frames.py``) against a plain CRC-8 and its own decoder;
- the bridge in Amaranth's simulator on a 1x1 mesh: good and bad frames through a UART line
  model; exactly the good wavelets reach the mesh's intake, the replies equal the golden
  model's outlets, every bad frame is counted in the status reply;
- the real :class:`runtime.board.BoardSystem` over pyserial (``socket://``) talking to the bridge
  simulated under cocotb (``tb/bridge_tb.py``): GEMMs bit-exact against :class:`GoldenSystem`,
  and a corrupted byte on the line that is counted, reported and never becomes a wavelet.
"""

import contextlib
import json
import socket
import threading
import time

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import data
from amaranth.sim import Simulator

from wse.fabric import pe_model
from wse.fabric.config import MeshConfig
from wse.fabric.mesh_model import MeshModel
from wse.fpga import serial_frames as sf
from wse.fpga.bridge import MeshBridge
from wse.runtime import BACKENDS, BoardError, BoardSystem, GoldenSystem, open_system
from wse.tb.uart_sim import receive_bytes, send_bytes

from .gemm_runs import run_gemm
from .layout_checks import assert_view_reads_back, enum_of, random_fields
from .test_mesh_cocotb import check_gemm, random_gemm

# --- the frame codec ---------------------------------------------------------------------------


def _reference_crc8(data):
    """CRC-8, polynomial 0x07, initial 0, MSB first, no final XOR: what the frames always used."""
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def test_crc8_is_crc8_smbus():
    algorithm = sf.CRC.algorithm
    assert (algorithm.crc_width, algorithm.polynomial, algorithm.initial_crc,
            algorithm.reflect_input, algorithm.reflect_output, algorithm.xor_output) \
        == (8, 0x07, 0x00, False, False, 0x00)
    assert sf.CRC.data_width == 8 and sf.CRC.residue() == 0
    assert sf.crc8(b"123456789") == 0xF4          # the catalogue's check value
    rng = np.random.default_rng(8)
    for n in (0, 1, 2, 7, 64):
        data = rng.integers(0, 256, n).astype(np.uint8).tobytes()
        assert sf.crc8(data) == _reference_crc8(data), data
    frame = sf.wavelet_frame(3, 0x3F_1234_5678)
    assert frame == bytes([0xA5, 0x03, 0x78, 0x56, 0x34, 0x12, 0x3F, sf.crc8(frame[1:7])])
    assert sf.crc8(frame[1:]) == 0


def test_crc8_catches_every_error_of_up_to_three_bits_in_a_frame():
    """What docs/bridge.md claims: no 1-, 2- or 3-bit error over command, payload and CRC
    leaves a frame that checks."""
    from itertools import combinations

    body = sf.wavelet_frame(1, 0x2A_DEAD_BEEF)[1:]
    value, bits = int.from_bytes(body, "little"), 8 * len(body)
    for k in (1, 2, 3):
        for flips in combinations(range(bits), k):
            flipped = value ^ sum(1 << b for b in flips)
            assert sf.crc8(flipped.to_bytes(len(body), "little")) != 0, flips


def test_host_frames_decode_and_every_fault_is_named():
    word = (1 << 38) - 1
    assert sf.decode_host_frame(sf.wavelet_frame(1, word), rows=2) == ("wavelet", 1, word)
    assert sf.decode_host_frame(sf.status_request(), rows=2) == ("status",)
    good = sf.wavelet_frame(0, 5)
    flipped = good[:3] + bytes([good[3] ^ 0x10]) + good[4:]
    cases = {
        flipped: "checksum",
        sf.wavelet_frame(2, 5): "row 2 is outside the 2-row mesh",
        b"\x5a" + good[1:]: "sync byte",
        good[:7]: "has 8 bytes, not 7",
        sf.raw_frame(0x41, bytes(5)): "unknown command 0x41",
        sf.raw_frame(0x00, bytes([0, 0, 0, 0, 0x40])): "reserved payload bits",
        sf.raw_frame(0x80, bytes([1, 0, 0, 0, 0])): "payload must be zero",
    }
    for frame, message in cases.items():
        with pytest.raises(sf.FrameError, match=message):
            sf.decode_host_frame(frame, rows=2)
    with pytest.raises(ValueError, match=r"^row must be an integer in 0..63, not 64$"):
        sf.wavelet_frame(64, 0)
    with pytest.raises(ValueError, match=r"^wavelet must be a 38-bit packed word"):
        sf.wavelet_frame(0, 1 << 38)


#: The frames' layouts and their codecs.
FRAME_LAYOUTS = [(sf.FrameCommand, sf.FRAME_COMMAND), (sf.WaveletPayload, sf.WAVELET_PAYLOAD),
                 (sf.CreditPayload, sf.CREDIT_PAYLOAD), (sf.StatusFlags, sf.STATUS_FLAGS),
                 (sf.StatusPayload, sf.STATUS_PAYLOAD)]


@pytest.mark.parametrize("layout, codec", FRAME_LAYOUTS, ids=[c.name for _, c in FRAME_LAYOUTS])
def test_frame_codecs_and_the_bridges_layouts_agree_field_by_field(layout, codec):
    """What the host packs with a codec, the bridge reads through a ``data.View`` of the same
    layout (Amaranth's simulator), every field; and the codec packs what ``layout.const``
    packs (enum fields: their members only)."""
    rng = np.random.default_rng(codec.width)
    n = 64
    fields = random_fields(layout, codec, rng, n)
    assert_view_reads_back(layout, codec, fields)
    for k in range(n):
        packed, const = {}, {}
        for name in codec.fields:
            shape, value = data.Layout.cast(layout)[name].shape, int(fields[name][k])
            if enum_of(layout, name):
                value = list(shape)[value % len(shape)]
            packed[name] = const[name] = value
            if isinstance(shape, type) and issubclass(shape, data.Struct):      # nested
                const[name] = data.Const(shape, value)
        assert layout.const(const).as_value().value == int(codec.pack(**packed)), packed


def test_command_byte_and_flags_keep_their_wire_encoding():
    """op in bits 7:6 (``WAVELET`` 0x00, ``CREDIT`` 0x40, ``STATUS`` 0x80), row or column in
    5:0; the fourth op is no command; the flags' bits are :class:`sf.Flag`'s."""
    assert [op.value << 6 for op in sf.Op] == [0x00, 0x40, 0x80]
    assert sf.command_byte(sf.Op.WAVELET, 37) == 0x25
    assert sf.command_byte(sf.Op.CREDIT, 63) == 0x7F
    assert sf.command_byte(sf.Op.STATUS) == 0x80
    assert sf.split_command(0x45) == (sf.Op.CREDIT, 5)
    assert sf.split_command(0xC3) == (None, 3)
    assert (sf.MAX_PORTS, sf.PAYLOAD_BYTES, sf.HOST_FRAME_BYTES) == (64, 5, 8)
    assert sf.WAVELET_PAYLOAD.fields == {"wavelet": (0, 38), "reserved": (38, 2)}
    assert sf.STATUS_PAYLOAD.fields == {"cycles": (0, 32), "flags": (32, 8),
                                        "bad_frames": (40, 16)}
    layout = data.Layout.cast(sf.StatusFlags)
    assert {flag.name.lower(): flag.value for flag in sf.Flag} \
        == {name: 1 << field.offset for name, field in layout if not name.startswith("_")}
    with pytest.raises(ValueError, match=r"^index must be an integer in 0..63, not 64$"):
        sf.command_byte(sf.Op.WAVELET, 64)
    # every reply, byte for byte as before the layouts
    assert sf.credit_frame(1, 8)[:7] == bytes([0xA5, 0x41, 8, 0, 0, 0, 0])
    assert sf.outlet_frame(2, 0x25_0000_0007)[:7] == bytes([0xA5, 0x02, 7, 0, 0, 0, 0x25])
    assert sf.status_frame(0x01020304, 0x0D, 0x0506)[:9] \
        == bytes([0xA5, 0x80, 4, 3, 2, 1, 0x0D, 6, 5])


def test_replies_decode_across_chunk_boundaries_and_a_bad_checksum_is_caught():
    stream = (sf.outlet_frame(2, 0x25_0000_0007) + sf.credit_frame(1, 8)
              + sf.status_frame(1234, sf.Flag.BAD_FRAME | sf.Flag.ERROR, 3))
    decoder, frames = sf.ReplyDecoder(), []
    for i in range(0, len(stream), 3):
        frames += decoder.feed(stream[i:i + 3])
    assert frames == [("outlet", 2, 0x25_0000_0007), ("credit", 1, 8),
                      ("status", sf.Status(1234, sf.Flag.BAD_FRAME | sf.Flag.ERROR, 3))]
    assert decoder.pending == 0
    broken = bytearray(sf.outlet_frame(0, 1))
    broken[4] ^= 1
    with pytest.raises(sf.FrameError, match="fails its checksum"):
        sf.ReplyDecoder().feed(bytes(broken))
    with pytest.raises(sf.FrameError, match="expected the sync byte"):
        sf.ReplyDecoder().feed(b"\x00")


def test_crc_processor_equals_the_codec_and_checks_frames():
    """The bridge's CRC logic (``sf.CRC.create()``, a byte a cycle): its ``crc`` after each
    byte equals :func:`sf.crc8` of the bytes so far, and ``match_detected`` holds exactly
    after a frame body whose checksum is right."""
    m = Module()
    m.submodules.crc = crc = sf.CRC.create()
    good = sf.wavelet_frame(5, 0x15_0BAD_CAFE)[1:]
    bad = bytearray(good)
    bad[2] ^= 0x40
    rng = np.random.default_rng(9)
    cases = [good, bytes(bad), rng.integers(0, 256, 20).astype(np.uint8).tobytes()]

    async def check(ctx):
        for case in cases:
            ctx.set(crc.start, 1)
            await ctx.tick()
            ctx.set(crc.start, 0)
            for i, byte in enumerate(case):
                ctx.set(crc.valid, 1)
                ctx.set(crc.data, byte)
                await ctx.tick()
                assert ctx.get(crc.crc) == sf.crc8(case[:i + 1]), (case, i)
            ctx.set(crc.valid, 0)
            assert ctx.get(crc.match_detected) == (sf.crc8(case) == 0), case

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(check)
    sim.run()


# --- the bridge in Amaranth's simulator --------------------------------------------------------

ONE = MeshConfig(1, 1, n_feat=4, n_tok=2, n_out=4)
DIVISOR = 4


def run_bridge(config, stream, *, fifo_depth=4, bad_stop=(), settle=100):
    """Send ``stream`` (bytes) to a bridge of ``config``; return (the words its intakes took,
    the decoded replies, the bridge, the cycles from the first word an intake took to the last
    the mesh was busy or offered an outlet word, both counted). ``bad_stop``: indices of bytes
    sent with a framing error."""
    dut = MeshBridge(config, clk_hz=DIVISOR * 1_000_000, baud=1_000_000,
                     fifo_depth=fifo_depth, shared_tile=False)
    taken, line = [], []
    mesh = dut.mesh
    ports = [(r, getattr(mesh, f"s_axis_w{r}_tvalid"), getattr(mesh, f"s_axis_w{r}_tready"),
              getattr(mesh, f"s_axis_w{r}_tdata"), getattr(mesh, f"s_axis_w{r}_tdest"),
              getattr(mesh, f"s_axis_w{r}_tuser")) for r in range(config.rows)]

    outlets = [getattr(mesh, f"m_axis_s{c}_tvalid") for c in range(config.cols)]
    first, last = [], []            # the cycle the first word entered; the last busy one

    async def intake(ctx):
        cycle = 0
        async for _, _, idle, *values in ctx.tick().sample(
                mesh.idle, *outlets, *(s for p in ports for s in p[1:])):
            cycle += 1
            offered, values = values[:len(outlets)], values[len(outlets):]
            for k, (r, *_) in enumerate(ports):
                valid, ready, data, dest, user = values[5 * k:5 * k + 5]
                if valid and ready:
                    taken.append((r, data | dest << 32 | user << 37))
                    first[:] = first or [cycle]
            if first and (not idle or any(offered)):
                last[:] = [cycle]

    async def replies(ctx):
        await receive_bytes(ctx, dut.tx, DIVISOR, line)

    async def host(ctx):
        await ctx.tick().repeat(3)
        await send_bytes(ctx, dut.rx, stream, DIVISOR, bad_stop=bad_stop)
        await ctx.tick().until(~dut.busy)
        await ctx.tick().repeat(settle)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(intake, background=True)
    sim.add_testbench(replies, background=True)
    sim.add_testbench(host)
    sim.run()
    assert all(ok for _, ok, _ in line), "a reply byte broke 8N1"
    span = last[0] - first[0] + 1 if first else 0
    return taken, sf.ReplyDecoder().feed(bytes(b for b, _, _ in line)), dut, span


def test_bridge_turns_good_frames_into_wavelets_and_counts_every_bad_one():
    core = ONE.core(0, 0)
    good = [pe_model.addr(core, 0), *pe_model.load(core, [-7, 300]), pe_model.read(core, 0, 2)]
    frames = [sf.wavelet_frame(0, good[0]), sf.wavelet_frame(0, good[1])]
    corrupt = bytearray(sf.wavelet_frame(0, pe_model.load(core, [999])[0]))
    corrupt[3] ^= 0x04                                   # a bit flipped on the line
    frames += [bytes(corrupt),
               sf.wavelet_frame(0, good[2]),
               sf.raw_frame(0x01, bytes(5)),                # row 1 of a 1-row mesh
               sf.wavelet_frame(0, pe_model.load(core, [5])[0]),    # sent with a framing error
               b"\x33",                                  # a stray byte between frames
               sf.raw_frame(0x41, bytes(5)),                # a command the host never sends
               sf.wavelet_frame(0, good[3]), sf.status_request()]
    stream = b"".join(frames)
    framing = stream.index(frames[5]) + 4
    taken, replies, _, span = run_bridge(ONE, stream, bad_stop={framing})
    assert taken == [(0, w) for w in good]               # nothing else entered the mesh
    want = MeshModel(ONE).exchange({0: good})
    outlets = [(c, w) for kind, c, w in replies[:-1] if kind == "outlet"]
    assert outlets == [(c, w) for c, words in want.items() for w in words]
    kind, status = replies[-1]
    assert kind == "status" and status.bad_frames == 5
    assert status.flags == sf.Flag.BAD_FRAME
    # The exchange's cycles, as the simulators count them: the bridge registers the mesh's
    # `idle` before it counts, a cycle late at both ends.
    assert status.cycles == span > 0
    # fifo_depth 4: a credit of 2 for every 2 wavelets taken, none left over after the status
    assert [r for r in replies if r[0] == "credit"] == [("credit", 0, 2)] * 2


# --- BoardSystem over pyserial against the bridge under cocotb ---------------------------------

SIM_DIVISOR = 8             # clock cycles a bit: 8 MHz at 1 Mbaud
MESH_2X2 = MeshConfig(2, 2, n_feat=8, n_tok=4, n_out=8)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def board_session(config, sim, *, corrupt=(), fifo_depth=sf.DEFAULT_FIFO_DEPTH, timeout=60.0):
    """A :class:`BoardSystem` on ``socket://`` to ``config``'s bridge simulated on ``sim``;
    yields ``(system, outcome)``, ``outcome["result"]`` the cocotb run's once it ended."""
    from wse.sim.cocotb_run import build_once, run

    built = build_once(
        lambda: MeshBridge(config, clk_hz=SIM_DIVISOR * 1_000_000, baud=1_000_000,
                           fifo_depth=fifo_depth),
        key=json.dumps([config.to_dict(), fifo_depth], sort_keys=True),
        top=f"wse_bridge_{config.rows}x{config.cols}", sim=sim, ports_only=True)
    port = _free_port()
    params = {"config": config.to_dict(), "divisor": SIM_DIVISOR, "port": port,
              "corrupt": list(corrupt)}
    outcome = {}

    def target():
        outcome["result"] = run(built, module="wse.tb.bridge_tb", params=params,
                                name=f"bridge-{port}", timeout=600)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while True:
        try:
            system = BoardSystem(config, port=f"socket://127.0.0.1:{port}", baud=1_000_000,
                                 timeout=timeout, fifo_depth=fifo_depth)
            break
        except BoardError as e:
            if "cannot open" not in str(e) or not thread.is_alive() \
                    or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    try:
        yield system, outcome
    finally:
        system.close()
        thread.join(timeout=120)


def _gemms(board, golden, figure, cases, seed=7):
    rng = np.random.default_rng(seed)
    for shape, sparsity, kwargs in cases:
        W, X = random_gemm(rng, *shape, sparsity, 0.2)
        got = check_gemm(board, golden, W, X, figure, **kwargs)
        assert got.cycles > 0 and not got.error


@pytest.mark.xdist_group("icarus")
def test_board_system_over_pyserial_reports_a_corrupted_frame_and_is_bit_exact(figure):
    """1x1 bridge on Icarus, the host on ``socket://``. First a bit flipped on the line inside
    a LOAD frame: the bridge drops that frame and counts it, the host raises, and the mesh
    then holds exactly what the golden model holds when that one LOAD never arrived (the load
    pointer did not move for it): dropped, not altered. Then a GEMM, bit-exact. The bridge's
    FIFOs hold 4 wavelets, so the host waits for credits in every exchange of more."""
    config = ONE
    core = config.core(0, 0)
    values = [11, -22, 33, -44, 55, -66, 77, -88]
    words = [pe_model.addr(core, 0), *pe_model.load(core, values)]
    hit = 8 + 8 * 3 + 3     # after the 8-byte open status request, a data byte of words[3]
    start = time.monotonic()
    with board_session(config, "icarus", corrupt=[hit], fifo_depth=4) as (board, outcome):
        with pytest.raises(BoardError, match=r"counted 1 bad frame\(s\) in this exchange"
                                             r" .*never entered the mesh") as raised:
            board.exchange({0: words})
        assert raised.value.exchange is not None and not raised.value.exchange.error
        assert board.last_status.bad_frames == 1
        assert board.last_status.flags == sf.Flag.BAD_FRAME
        golden = GoldenSystem(config)
        golden.exchange({0: words[:3] + words[4:]})           # the LOAD of 33 never came
        x = board.memcpy_d2h("X", 0, 0, 1, 1, 8)              # the link works on
        np.testing.assert_array_equal(x, golden.memcpy_d2h("X", 0, 0, 1, 1, 8))
        assert list(x.ravel()) == [11, -22, -44, 55, -66, 77, -88, 0]
        _gemms(board, golden, figure, [((4, 4, 2), 0.5, {})])
        assert board.bad_frames == 1                          # no more since
        assert board.credit_waits > 0
        frames, waits = board.frames_sent, board.credit_waits
    result = outcome["result"]
    assert result.passed, result.failures
    figure(f"bridge 1x1 icarus: {frames} wavelet frames ({waits} waits for credit), 1 "
           f"corrupted on the line: 1 bad frame counted and reported, its LOAD dropped (not "
           f"altered); GEMM bit-exact; "
           f"{time.monotonic() - start:.0f} s wall")


@pytest.mark.slow
def test_board_system_runs_gemms_through_a_2x2_bridge_on_verilator(figure):
    config = MESH_2X2
    start = time.monotonic()
    with board_session(config, "verilator") as (board, outcome), GoldenSystem(config) as golden:
        _gemms(board, golden, figure, [((6, 8, 8), 0.5, {}), ((8, 8, 8), 0.0, {"raw": True}),
                                       ((8, 8, 6), 0.9, {"balance": False})])
        assert board.bad_frames == 0 and not board.last_status.flags
        frames, waits = board.frames_sent, board.credit_waits
    result = outcome["result"]
    assert result.passed, result.failures
    figure(f"bridge 2x2 verilator: {frames} wavelet frames ({waits} waits for credit), 0 bad "
           f"frames, "
           f"{time.monotonic() - start:.0f} s wall")


# --- clear errors -------------------------------------------------------------------------------


def test_bridge_parameters_are_checked_with_clear_messages():
    with pytest.raises(TypeError, match=r"^config must be a MeshConfig, not 'x'$"):
        MeshBridge("x", clk_hz=8_000_000, baud=1_000_000)
    with pytest.raises(ValueError, match=r"^clk_hz // baud must be at least 4 clock cycles"):
        MeshBridge(ONE, clk_hz=3_000_000, baud=1_000_000)
    with pytest.raises(ValueError, match=r"^baud 115200 from clk_hz 1000000 \(divisor 8\) is off"):
        MeshBridge(ONE, clk_hz=1_000_000, baud=115_200)
    with pytest.raises(ValueError, match=r"^fifo_depth must be an integer in 2..256, not 1$"):
        MeshBridge(ONE, clk_hz=8_000_000, baud=1_000_000, fifo_depth=1)
    assert MeshBridge(ONE, clk_hz=24_000_000, baud=115_200).divisor == 208
    for kwargs, message in [({"baud": 0}, r"^baud must be an integer of at least 1, not 0$"),
                            ({"baud": True}, r"^baud must be an integer of at least 1, not True$"),
                            ({"fifo_depth": 300}, r"^fifo_depth must be an integer in 2..256")]:
        with pytest.raises(ValueError, match=message):
            BoardSystem(ONE, port="loop://", **kwargs)


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), 0, -1])
def test_board_timeout_must_be_a_finite_positive_number(timeout):
    """A nan timeout would never pass a deadline: on a silent board the host would wait
    forever. It is refused before the port is opened, in one line naming ``timeout``."""
    with pytest.raises(ValueError) as raised:
        BoardSystem(ONE, port="loop://", timeout=timeout)
    assert str(raised.value) == f"timeout must be a finite number above 0, not {timeout!r}"


@contextlib.contextmanager
def fake_bridge(answer):
    """A TCP server that reads host bytes and writes ``answer(data)`` back."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def serve():
        conn, _ = listener.accept()
        with conn:
            while data := conn.recv(4096):
                conn.sendall(answer(data))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"socket://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def test_board_system_names_a_dead_port_a_silent_bridge_and_a_corrupt_reply():
    with pytest.raises(BoardError, match=r"^cannot open the serial port 'socket://127.0.0.1:"):
        BoardSystem(ONE, port=f"socket://127.0.0.1:{_free_port()}", timeout=0.2)
    with fake_bridge(lambda data: b"") as url, \
            pytest.raises(BoardError, match=r"no reply from the bridge on 'socket://.*' within "
                                            r"0.2 s while waiting for the status reply"):
        BoardSystem(ONE, port=url, timeout=0.2)
    broken = bytearray(sf.status_frame(0, 0, 0))
    broken[3] ^= 1
    with fake_bridge(lambda data: bytes(broken)) as url, \
            pytest.raises(BoardError, match=r"reply from the bridge .* is corrupt: .*checksum"):
        BoardSystem(ONE, port=url, timeout=2)


class BridgeModel:
    """The bridge's protocol in Python over the golden mesh model, for :func:`fake_bridge`: a
    credit as soon as a row's ``fifo_depth // 2`` wavelets are in (the mesh takes them at
    once), the exchange run at the status request, outlet frames column after column."""

    def __init__(self, config, fifo_depth):
        self.config, self.chunk = config, fifo_depth // 2
        self.model = MeshModel(config)
        self.buffer, self.streams, self.taken = b"", {}, {}

    def __call__(self, data):
        self.buffer += data
        out = bytearray()
        while len(self.buffer) >= sf.HOST_FRAME_BYTES:
            frame = sf.decode_host_frame(self.buffer[:sf.HOST_FRAME_BYTES], self.config.rows)
            self.buffer = self.buffer[sf.HOST_FRAME_BYTES:]
            if frame[0] == "wavelet":
                _, row, word = frame
                self.streams.setdefault(row, []).append(word)
                self.taken[row] = self.taken.get(row, 0) + 1
                if self.taken[row] == self.chunk:
                    out += sf.credit_frame(row, self.chunk)
                    self.taken[row] = 0
            else:
                for col, words in self.model.exchange(self.streams).items():
                    out += b"".join(sf.outlet_frame(col, w) for w in words)
                out += sf.status_frame(0, sf.Flag.ERROR * bool(self.model.error), 0)
                self.streams, self.taken = {}, {}
        return bytes(out)


def test_board_system_paces_rows_by_credit_and_sorts_outlets_by_column():
    """The host side alone, against :class:`BridgeModel` on a 2x3 mesh with 4-deep FIFOs:
    GEMMs equal the golden System's, results and counters."""
    config = MeshConfig(2, 3, n_feat=8, n_tok=2, n_out=8)
    with fake_bridge(BridgeModel(config, 4)) as url, \
            open_system("board", config, port=url, timeout=10, fifo_depth=4) as board, \
            GoldenSystem(config) as golden:
        rng = np.random.default_rng(11)
        for shape, kwargs in [((8, 12, 6), {}), ((6, 16, 5), {"raw": True})]:
            W, X = random_gemm(rng, *shape, 0.3)
            got, want = run_gemm(board, W, X, **kwargs), run_gemm(golden, W, X, **kwargs)
            np.testing.assert_array_equal(got.y, want.y)
            for name, value in want.counters.items():
                np.testing.assert_array_equal(got.counters[name], value, err_msg=name)
        assert board.credit_waits > 0 and board.bad_frames == 0
    assert "board" in BACKENDS and board.backend == "board"
