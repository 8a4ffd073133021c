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
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from wse.fabric.config import MeshConfig
from wse.fabric.mesh import AxiStreamMesh
from wse.fpga.serial_frames import (
    CRC,
    DEFAULT_FIFO_DEPTH,
    MAX_PORTS,
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

from .uart import UARTRx, UARTTx, divisor_for

__all__ = ["MeshBridge"]

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
        m.d.comb += [urx.rx.eq(self.rx), self.tx.eq(utx.tx)]

        fifos = []
        for r in range(cfg.rows):
            fifo = SyncFIFOBuffered(width=WAVELET_BITS, depth=self.fifo_depth)
            m.submodules[f"fifo_{r}"] = fifo
            fifos.append(fifo)

        # Receive: frames -> row FIFOs ---------------------------------------------------------
        body = Signal(data.StructLayout({       # shifted in a byte at a time, first lowest
            "command": FrameCommand, "payload": WaveletPayload, "crc": 8}))
        got = Signal(range(7))
        m.submodules.rx_crc = rx_crc = CRC.create()     # over the body; residue 0 if intact
        rx_ferr = Signal()
        bad_frames = Signal(16)
        bad_seen = Signal()
        dropped = Signal()
        flush = Signal()
        bad = Signal()              # comb: count one bad frame this cycle
        byte = urx.o.payload
        command, payload, row = body.command, body.payload, body.command.index
        room = Signal()
        for r, fifo in enumerate(fifos):
            m.d.comb += fifo.w_data.eq(payload.wavelet)
            with m.If(row == r):
                m.d.comb += room.eq(fifo.w_rdy)
        with m.FSM(name="rx_frame") as rx_fsm:
            with m.State("HUNT"):
                with m.If(urx.o.valid):
                    with m.If(byte.error | (byte.data != SYNC)):
                        m.d.comb += bad.eq(1)
                    with m.Else():
                        m.d.comb += rx_crc.start.eq(1)
                        m.d.sync += [got.eq(0), rx_ferr.eq(0)]
                        m.next = "BODY"
            with m.State("BODY"):
                with m.If(urx.o.valid):
                    m.d.comb += [rx_crc.valid.eq(1), rx_crc.data.eq(byte.data)]
                    m.d.sync += [body.eq(Cat(body.as_value()[8:], byte.data)),
                                 rx_ferr.eq(rx_ferr | byte.error), got.eq(got + 1)]
                    with m.If(got == 6):
                        m.next = "CHECK"
            with m.State("CHECK"):
                intact = rx_crc.match_detected & ~rx_ferr
                wavelet = (command.op == Op.WAVELET) & (row < cfg.rows) & (payload.reserved == 0)
                status = (command.op == Op.STATUS) & (command.index == 0) \
                    & (payload.as_value() == 0)
                with m.If(intact & wavelet):
                    with m.If(room):
                        for r, fifo in enumerate(fifos):
                            m.d.comb += fifo.w_en.eq(row == r)
                    with m.Else():
                        m.d.comb += bad.eq(1)
                        m.d.sync += dropped.eq(1)
                with m.Elif(intact & status):
                    m.d.sync += flush.eq(1)
                with m.Else():
                    m.d.comb += bad.eq(1)
                m.next = "HUNT"
        with m.If(bad):
            m.d.sync += [bad_seen.eq(1), bad_frames.eq(bad_frames + (bad_frames != 0xFFFF))]

        # Row FIFOs -> intakes, credits, the exchange's cycles ---------------------------------
        taken = [Signal(range(self.fifo_depth + 1), name=f"taken_{r}") for r in range(cfg.rows)]
        took = []           # a FIFO gave a wavelet (its credit)
        entered = []        # an intake took a wavelet (the exchange's first cycle)
        # Each FIFO reaches its intake through a register stage: the intake's ready (which
        # depends on the wavelet's route, looked up as it arrives) ends at the stage's
        # registers instead of running on into the FIFO's read side, and the intake's arrival
        # logic starts at a flip-flop (docs/bridge.md).
        skids = []
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
        for c in range(cfg.cols):
            word = Signal(Wavelet, name=f"outlet_{c}")
            m.d.comb += [word.data.eq(getattr(mesh, f"m_axis_s{c}_tdata")),
                         word.color.eq(getattr(mesh, f"m_axis_s{c}_tdest")),
                         word.ctrl.eq(getattr(mesh, f"m_axis_s{c}_tuser"))]
            outlets.append((getattr(mesh, f"m_axis_s{c}_tvalid"),
                            getattr(mesh, f"m_axis_s{c}_tready"), word))
        # The mesh's `idle`, `error` and `overflow` are reductions over every tile: each is
        # registered here before anything uses it, so that no path runs from a tile across the
        # device and on through the bridge's logic (a 4x4's critical path on the ECP5 did).
        # `quiet` is the cycle before's: the span below counts the same cycles.
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
            m.d.sync += elapsed.eq(elapsed + (elapsed != 0xFFFF_FFFF))
            with m.If(~quiet):
                m.d.sync += span.eq(elapsed)

        # Transmit: status, credits, outlets -> frames ------------------------------------------
        tx_body = Signal(8 * 8)     # command and payload, sent lowest byte first
        tx_left = Signal(range(9))
        m.submodules.tx_crc = tx_crc = CRC.create()     # over the body as it goes out
        credit_due = [t >= self.credit for t in taken]
        give = Signal(6)
        giving = Signal()
        for r in reversed(range(cfg.rows)):
            with m.If(credit_due[r]):
                m.d.comb += [give.eq(r), giving.eq(1)]
        last_col = Signal(6)
        pick = Signal(6)
        picking = Signal()
        for first_pass in (True, False):
            for c in reversed(range(cfg.cols)):
                valid = outlets[c][0] if first_pass else outlets[c][0] & (c > last_col)
                with m.If(valid):
                    m.d.comb += [pick.eq(c), picking.eq(1)]
        credit_taken = Signal()     # comb: the credit of row ``give`` goes out this cycle
        status_out = Signal()       # comb: the status reply goes out this cycle
        reply = Signal(FrameCommand)        # comb: the command of the reply chosen this cycle
        status = Signal(StatusPayload)
        m.d.comb += [status.eq(0),          # the padding
                     status.cycles.eq(span), status.bad_frames.eq(bad_frames),
                     status.flags.error.eq(mesh_error), status.flags.overflow.eq(mesh_overflow),
                     status.flags.bad_frame.eq(bad_seen), status.flags.dropped.eq(dropped)]
        credit = CreditPayload.const({"count": self.credit})
        # comb: the outlet picked. Every field is assigned where it is picked: a field left at
        # its init would be a constant `always @*` that Icarus never runs (amaranth#1629).
        outlet = Signal(WaveletPayload)
        with m.FSM(name="tx_frame") as tx_fsm:
            with m.State("IDLE"):
                with m.If(flush & (settled == SETTLE_CYCLES)):
                    m.d.comb += [status_out.eq(1), reply.op.eq(Op.STATUS)]
                    m.d.sync += [tx_body.eq(Cat(reply, status)),
                                 tx_left.eq(8), flush.eq(0), started.eq(0), elapsed.eq(0),
                                 span.eq(0)]
                    m.next = "SYNC"
                with m.Elif(giving):
                    m.d.comb += [credit_taken.eq(1), reply.op.eq(Op.CREDIT), reply.index.eq(give)]
                    m.d.sync += [tx_body.eq(Cat(reply, credit)), tx_left.eq(6)]
                    m.next = "SYNC"
                with m.Elif(picking):
                    m.d.comb += [reply.op.eq(Op.WAVELET), reply.index.eq(pick)]
                    for c, (_, ready, word) in enumerate(outlets):
                        with m.If(pick == c):
                            m.d.comb += [ready.eq(1), outlet.wavelet.eq(word),
                                         outlet.reserved.eq(0)]
                    m.d.sync += [tx_body.eq(Cat(reply, outlet)), tx_left.eq(6),
                                 last_col.eq(pick)]
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

        for r in range(cfg.rows):
            less = Mux(credit_taken & (give == r), self.credit, 0)
            m.d.sync += taken[r].eq(Mux(status_out, 0, taken[r] + took[r] - less))

        m.d.comb += [
            self.error.eq(mesh_error | mesh_overflow | bad_seen),
            self.busy.eq(~quiet | flush | ~rx_fsm.ongoing("HUNT") | ~tx_fsm.ongoing("IDLE")),
        ]
        return m

