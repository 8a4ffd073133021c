"""The serial bridge: a mesh behind a UART, driven by checksummed frames (``docs/bridge.md``).

The host sends 8-byte frames (:mod:`fpga.serial_frames`), each a wavelet for one row's intake
or a status request; the bridge sends back a frame for every wavelet that leaves an outlet,
credit frames that pace the host, and a status frame once an exchange is over. Both checksums
are ``amaranth.lib.crc`` processors of the frames' CRC (:data:`fpga.serial_frames.CRC`), each
taking a byte in the cycle the UART hands it over or takes it. The command byte and the payloads
are read and built through views of their layouts (:class:`fpga.serial_frames.FrameCommand`,
``WaveletPayload``, ``CreditPayload``, ``StatusPayload``), the wavelets through
:class:`rtl.wavelet.Wavelet`'s.
"""


from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from wse.fabric.config import MeshConfig
from wse.fabric.mesh import AxiStreamMesh
from wse.fpga.serial_frames import (
    CRC,
    DEFAULT_FIFO_DEPTH,
    HOST_FRAME_BYTES,
    MAX_PORTS,
    PAYLOAD_BYTES,
    STATUS_PAYLOAD_BYTES,
    SYNC,
    CreditPayload,
    FrameCommand,
    Op,
    StatusPayload,
    WaveletPayload,
)
from wse.rtl.skid import RegisterStage
from wse.rtl.validate import integer
from wse.rtl.wavelet import WAVELET_BITS, Wavelet

from .uart import RxByte, UARTRx, UARTTx, divisor_for

__all__ = ["CreditCounter", "FrameReceiver", "MeshBridge", "OutletPick"]

#: Cycles the mesh must stay idle, with every FIFO empty, before a status reply goes out.
SETTLE_CYCLES = 2


class MeshBridge(wiring.Component):
    """An :class:`~fabric.mesh.AxiStreamMesh` of ``config`` behind a UART.

    Host frames are checked (sync, CRC-8, command, row, reserved bits, no framing error in any
    byte); a good wavelet frame goes into its row's FIFO (``fifo_depth`` wavelets), which feeds
    the row's intake. A bad frame is counted (16 bits, saturating), sets ``error``, and never
    reaches the mesh. Every outlet wavelet is sent back in a frame with its column (round-robin
    over the columns); every ``fifo_depth // 2`` wavelets a row's intake takes are returned to
    the host as a credit frame. A status request is answered once every FIFO is empty, the mesh
    has been idle for :data:`SETTLE_CYCLES` cycles and every outlet frame has gone, with the
    cycles of the exchange, the flags and the bad-frame count
    (:class:`fpga.serial_frames.Status`).

    Throughput is the UART's: a host frame every ``80 * divisor`` cycles at best.

    Parameters
    ----------
    config : MeshConfig
        The mesh (at most 64 rows and 64 columns).
    clk_hz, baud : int
        Clock and baud rates; one bit is ``clk_hz // baud`` cycles (at least 4, within 2 %).
    fifo_depth : int
        Wavelets each row's intake FIFO holds, 2..256 (the host's credit per row).
    shared_tile : bool
        As :class:`~fabric.mesh.Mesh`'s (``False`` for Amaranth's simulator).

    Members
    -------
    rx : In(1)
        Serial line from the host.
    tx : Out(1)
        Serial line to the host.
    error : Out(1)
        Sticky: the mesh's ``error`` or ``overflow``, or a bad frame.
    busy : Out(1)
        A frame is being received or sent, a FIFO holds a wavelet or the mesh is not idle.
    """

    rx: In(1, init=1)
    tx: Out(1, init=1)
    error: Out(1)
    busy: Out(1)

    def __init__(self, config, *, clk_hz, baud, fifo_depth=DEFAULT_FIFO_DEPTH, shared_tile=True):
        if not isinstance(config, MeshConfig):
            raise TypeError(f"config must be a MeshConfig, not {config!r}")
        if config.rows > MAX_PORTS or config.cols > MAX_PORTS:
            raise ValueError(f"the bridge addresses at most {MAX_PORTS} rows and columns, "
                             f"not a {config.rows}x{config.cols} mesh")
        self.divisor = divisor_for(clk_hz, baud)
        depth = integer("fifo_depth", fifo_depth, 2, 256)
        self.config, self.clk_hz, self.baud, self.fifo_depth = config, clk_hz, baud, depth
        self.credit = depth // 2
        self.mesh = AxiStreamMesh(config, shared_tile=shared_tile)
        super().__init__()

    def verilog_dependencies(self):
        """The shared tile module's Verilog, which must be compiled with this design's."""
        return self.mesh.verilog_dependencies()

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        m.submodules.mesh = mesh = self.mesh
        m.submodules.uart_rx = urx = UARTRx(self.divisor)
        m.submodules.uart_tx = utx = UARTTx(self.divisor)
        m.submodules.receiver = receiver = FrameReceiver(cfg.rows)
        m.submodules.credits = credits = CreditCounter(cfg.rows, self.fifo_depth, self.credit)
        m.submodules.outlet_pick = outlet_pick = OutletPick(cfg.cols)
        m.d.comb += [urx.rx.eq(self.rx), self.tx.eq(utx.tx)]
        wiring.connect(m, urx.o, receiver.byte)

        fifos = []
        for r in range(cfg.rows):
            fifo = SyncFIFOBuffered(width=WAVELET_BITS, depth=self.fifo_depth)
            m.submodules[f"fifo_{r}"] = fifo
            fifos.append(fifo)
        flush = Signal()            # a status request waits for the mesh to settle
        room = Signal()
        for r, fifo in enumerate(fifos):
            m.d.comb += [fifo.w_data.eq(receiver.wavelet), fifo.w_en.eq(receiver.w_en[r])]
            with m.If(receiver.row == r):
                m.d.comb += room.eq(fifo.w_rdy)
        m.d.comb += receiver.room.eq(room)
        with m.If(receiver.status):
            m.d.sync += flush.eq(1)

        skids, took, entered, outlets = self._intakes(m, fifos)
        m.d.comb += [credits.took.eq(Cat(*took)),
                     outlet_pick.valid.eq(Cat(*(v for v, _, _ in outlets)))]
        # The mesh's `idle`, `error` and `overflow` are reductions over every tile: each is
        # registered here before anything uses it, so that no path runs from a tile across the
        # device and on through the bridge's logic. `quiet` is the cycle before's: the span
        # below counts the same cycles.
        quiet = Signal(init=1)
        m.d.sync += quiet.eq(mesh.idle & ~Cat(*(v for v, _, _ in outlets)).any()
                             & ~Cat(*(f.r_rdy | (f.w_level != 0) for f in fifos)).any()
                             & ~Cat(*(s.busy for s in skids)).any())
        mesh_error, mesh_overflow = Signal(), Signal()
        m.d.sync += [mesh_error.eq(mesh.error), mesh_overflow.eq(mesh.overflow)]
        settled = Signal(range(SETTLE_CYCLES + 1))
        m.d.sync += settled.eq(Mux(quiet, settled + (settled != SETTLE_CYCLES), 0))

        # `span`: the cycles from the first wavelet an intake took to the last cycle the mesh
        # was busy, both counted (`quiet` is a cycle late, and so is `elapsed` against it).
        started, elapsed, span = Signal(), Signal(32), Signal(32)
        with m.If(~started):
            with m.If(Cat(*entered).any()):
                m.d.sync += [started.eq(1), elapsed.eq(1), span.eq(1)]
        with m.Else():
            m.d.sync += elapsed.eq(elapsed + (elapsed != (1 << len(elapsed)) - 1))
            with m.If(~quiet):
                m.d.sync += span.eq(elapsed)

        # Transmit: status, credits, outlets -> frames.
        status = Signal(StatusPayload)
        m.d.comb += [status.eq(0),          # the padding
                     status.cycles.eq(span), status.bad_frames.eq(receiver.bad_frames),
                     status.flags.error.eq(mesh_error), status.flags.overflow.eq(mesh_overflow),
                     status.flags.bad_frame.eq(receiver.bad_seen),
                     status.flags.dropped.eq(receiver.dropped)]
        tx_body = Signal(8 * (1 + STATUS_PAYLOAD_BYTES))    # sent lowest byte first
        tx_left = Signal(range(1 + STATUS_PAYLOAD_BYTES + 1))
        m.submodules.tx_crc = tx_crc = CRC.create()     # over the body as it goes out
        reply = Signal(FrameCommand)        # comb: the command of the reply chosen this cycle
        credit = CreditPayload.const({"count": self.credit})
        # comb: the outlet picked. Every field is assigned where it is picked: a field left at
        # its init would be a constant `always @*` that Icarus never runs (amaranth#1629).
        outlet = Signal(WaveletPayload)
        with m.FSM(name="tx_frame") as tx_fsm:
            with m.State("IDLE"):
                with m.If(flush & (settled == SETTLE_CYCLES)):
                    m.d.comb += [credits.clear.eq(1), reply.op.eq(Op.STATUS)]
                    m.d.sync += [tx_body.eq(Cat(reply, status)),
                                 tx_left.eq(1 + STATUS_PAYLOAD_BYTES), flush.eq(0),
                                 started.eq(0), elapsed.eq(0), span.eq(0)]
                    m.next = "SYNC"
                with m.Elif(credits.giving):
                    m.d.comb += [credits.sent.eq(1), reply.op.eq(Op.CREDIT),
                                 reply.index.eq(credits.give)]
                    m.d.sync += [tx_body.eq(Cat(reply, credit)), tx_left.eq(1 + PAYLOAD_BYTES)]
                    m.next = "SYNC"
                with m.Elif(outlet_pick.picking):
                    pick = outlet_pick.pick
                    m.d.comb += [reply.op.eq(Op.WAVELET), reply.index.eq(pick)]
                    for c, (_, ready, word) in enumerate(outlets):
                        with m.If(pick == c):
                            m.d.comb += [ready.eq(1), outlet.wavelet.eq(word),
                                         outlet.reserved.eq(0)]
                    m.d.sync += [tx_body.eq(Cat(reply, outlet)), tx_left.eq(1 + PAYLOAD_BYTES),
                                 outlet_pick.last.eq(pick)]
                    m.next = "SYNC"
            with m.State("SYNC"):
                m.d.comb += [utx.i.valid.eq(1), utx.i.payload.eq(SYNC)]
                with m.If(utx.i.ready):
                    m.d.comb += tx_crc.start.eq(1)
                    m.next = "BODY"
            with m.State("BODY"):
                m.d.comb += [utx.i.valid.eq(1), utx.i.payload.eq(tx_body[0:8])]
                with m.If(utx.i.ready):
                    m.d.comb += [tx_crc.valid.eq(1), tx_crc.data.eq(tx_body[0:8])]
                    m.d.sync += [tx_body.eq(tx_body >> 8), tx_left.eq(tx_left - 1)]
                    with m.If(tx_left == 1):
                        m.next = "CRC"
            with m.State("CRC"):
                m.d.comb += [utx.i.valid.eq(1), utx.i.payload.eq(tx_crc.crc)]
                with m.If(utx.i.ready):
                    m.next = "IDLE"

        m.d.comb += [
            self.error.eq(mesh_error | mesh_overflow | receiver.bad_seen),
            self.busy.eq(~quiet | flush | ~receiver.hunting | ~tx_fsm.ongoing("IDLE")),
        ]
        return m

    def _intakes(self, m, fifos):
        """Each row FIFO to its intake through a register stage, and the outlets' words:
        ``(stages, took, entered, outlets)``, ``took[r]`` a FIFO gave a wavelet (its credit),
        ``entered[r]`` an intake took one (the exchange's first cycle), ``outlets[c]`` an
        outlet's ``(valid, ready, word)``. The stage ends the intake's ready (which depends on
        the wavelet's route, looked up as it arrives) at its registers instead of running on
        into the FIFO's read side, and the intake's arrival logic starts at a flip-flop
        (``docs/bridge.md``)."""
        mesh = self.mesh
        took, entered, skids = [], [], []
        for r, fifo in enumerate(fifos):
            port = f"s_axis_w{r}"
            skid = m.submodules[f"stage_{r}"] = RegisterStage(Wavelet)
            skids.append(skid)
            m.d.comb += [skid.i.payload.eq(fifo.r_data), skid.i.valid.eq(fifo.r_rdy),
                         fifo.r_en.eq(skid.i.ready)]
            word = skid.o.payload
            m.d.comb += [getattr(mesh, f"{port}_tdata").eq(word.data),
                         getattr(mesh, f"{port}_tdest").eq(word.color),
                         getattr(mesh, f"{port}_tuser").eq(word.ctrl),
                         getattr(mesh, f"{port}_tvalid").eq(skid.o.valid),
                         skid.o.ready.eq(getattr(mesh, f"{port}_tready"))]
            took.append(fifo.r_rdy & skid.i.ready)
            entered.append(skid.o.valid & skid.o.ready)
        outlets = []
        for c in range(self.config.cols):
            word = Signal(Wavelet, name=f"outlet_{c}")
            m.d.comb += [word.data.eq(getattr(mesh, f"m_axis_s{c}_tdata")),
                         word.color.eq(getattr(mesh, f"m_axis_s{c}_tdest")),
                         word.ctrl.eq(getattr(mesh, f"m_axis_s{c}_tuser"))]
            outlets.append((getattr(mesh, f"m_axis_s{c}_tvalid"),
                            getattr(mesh, f"m_axis_s{c}_tready"), word))
        return skids, took, entered, outlets


#: The bytes of a host frame after its sync byte: the command, the payload and the CRC.
BODY_BYTES = HOST_FRAME_BYTES - 1


class FrameReceiver(wiring.Component):
    """Host frames from the UART's bytes, checked (:class:`MeshBridge`'s rules): a good
    wavelet frame for a row whose FIFO has ``room`` is written (``w_en``: that row's bit,
    ``wavelet``) in the cycle after its last byte; a good status request sets ``status`` for a
    cycle; a bad frame (or a wavelet frame for a full FIFO, which also sets ``dropped``) is
    counted in ``bad_frames`` (saturating) and sets ``bad_seen``. ``row`` is the row the frame
    names (for ``room``); ``hunting`` is low while a frame is being received.

    Members
    -------
    byte : In(stream.Signature(RxByte, always_ready=True))
    room : In(1)
    row : Out(range(MAX_PORTS))
    wavelet : Out(Wavelet)
    w_en : Out(rows)
    status, dropped, bad_seen, hunting : Out(1)
    bad_frames : Out(16)
    """

    def __init__(self, rows):
        self.rows = rows
        super().__init__({
            "byte": In(stream.Signature(RxByte, always_ready=True)), "room": In(1),
            "row": Out(range(MAX_PORTS)), "wavelet": Out(Wavelet), "w_en": Out(rows),
            "status": Out(1), "dropped": Out(1), "bad_seen": Out(1), "hunting": Out(1),
            "bad_frames": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        body = Signal(data.StructLayout({       # shifted in a byte at a time, first lowest
            "command": FrameCommand, "payload": WaveletPayload, "crc": 8}))
        got = Signal(range(BODY_BYTES))
        m.submodules.rx_crc = rx_crc = CRC.create()     # over the body; residue 0 if intact
        rx_ferr = Signal()
        bad_frames, bad_seen, dropped = self.bad_frames, self.bad_seen, self.dropped
        bad = Signal()              # comb: count one bad frame this cycle
        byte = self.byte.payload
        command, payload, row = body.command, body.payload, body.command.index
        m.d.comb += [self.row.eq(row), self.wavelet.eq(payload.wavelet)]
        with m.FSM(name="rx_frame") as rx_fsm:
            with m.State("HUNT"):
                with m.If(self.byte.valid):
                    with m.If(byte.error | (byte.data != SYNC)):
                        m.d.comb += bad.eq(1)
                    with m.Else():
                        m.d.comb += rx_crc.start.eq(1)
                        m.d.sync += [got.eq(0), rx_ferr.eq(0)]
                        m.next = "BODY"
            with m.State("BODY"):
                with m.If(self.byte.valid):
                    m.d.comb += [rx_crc.valid.eq(1), rx_crc.data.eq(byte.data)]
                    m.d.sync += [body.eq(Cat(body.as_value()[8:], byte.data)),
                                 rx_ferr.eq(rx_ferr | byte.error), got.eq(got + 1)]
                    with m.If(got == BODY_BYTES - 1):
                        m.next = "CHECK"
            with m.State("CHECK"):
                intact = rx_crc.match_detected & ~rx_ferr
                wavelet = (command.op == Op.WAVELET) & (row < self.rows) & (payload.reserved == 0)
                status = (command.op == Op.STATUS) & (command.index == 0) \
                    & (payload.as_value() == 0)
                with m.If(intact & wavelet):
                    with m.If(self.room):
                        m.d.comb += [self.w_en[r].eq(row == r) for r in range(self.rows)]
                    with m.Else():
                        m.d.comb += bad.eq(1)
                        m.d.sync += dropped.eq(1)
                with m.Elif(intact & status):
                    m.d.comb += self.status.eq(1)
                with m.Else():
                    m.d.comb += bad.eq(1)
                m.next = "HUNT"
        with m.If(bad):
            m.d.sync += [bad_seen.eq(1),
                         bad_frames.eq(bad_frames + (bad_frames != (1 << len(bad_frames)) - 1))]
        m.d.comb += self.hunting.eq(rx_fsm.ongoing("HUNT"))
        return m


class CreditCounter(wiring.Component):
    """Per row, the wavelets its FIFO gave its intake (``took``) since the last credit: once
    ``credit`` are owed, the lowest such row is ``give`` (``giving``); ``sent`` takes ``credit``
    off row ``give``'s count; ``clear`` (a status reply) zeroes every count.

    Members
    -------
    took : In(rows)
    sent, clear : In(1)
    give : Out(range(MAX_PORTS))
    giving : Out(1)
    """

    def __init__(self, rows, fifo_depth, credit):
        self.rows, self.fifo_depth, self.credit = rows, fifo_depth, credit
        super().__init__({"took": In(rows), "sent": In(1), "clear": In(1),
                          "give": Out(range(MAX_PORTS)), "giving": Out(1)})

    def elaborate(self, platform):
        m = Module()
        taken = [Signal(range(self.fifo_depth + 1), name=f"taken_{r}") for r in range(self.rows)]
        for r in reversed(range(self.rows)):
            with m.If(taken[r] >= self.credit):
                m.d.comb += [self.give.eq(r), self.giving.eq(1)]
        for r in range(self.rows):
            less = Mux(self.sent & (self.give == r), self.credit, 0)
            m.d.sync += taken[r].eq(Mux(self.clear, 0, taken[r] + self.took[r] - less))
        return m


class OutletPick(wiring.Component):
    """The outlet whose wavelet goes out next (``pick``, when ``picking``): the first valid one
    after ``last``, else the first valid one: round robin over the columns. Combinational.

    Members
    -------
    valid : In(cols)
    last : In(range(MAX_PORTS))
        The outlet picked before (the sender's register).
    pick : Out(range(MAX_PORTS))
    picking : Out(1)
    """

    def __init__(self, cols):
        self.cols = cols
        super().__init__({"valid": In(cols), "last": In(range(MAX_PORTS)),
                          "pick": Out(range(MAX_PORTS)), "picking": Out(1)})

    def elaborate(self, platform):
        m = Module()
        for first_pass in (True, False):
            for c in reversed(range(self.cols)):
                valid = self.valid[c] if first_pass else self.valid[c] & (c > self.last)
                with m.If(valid):
                    m.d.comb += [self.pick.eq(c), self.picking.eq(1)]
        return m
