#!/usr/bin/env python3
"""Independent XCDR1 encodings from Cyclone DDS's Python binding, for topics/tests/crosscheck.rs.

The types below are written by hand from their IDL (topics/idl/avionics.idl and the IDL in
the docs of spindle_topics::builtin), with cyclonedds.idl: nothing is shared with the Rust
code except the IDL text.

Modes (output is one line per item, fields separated by single spaces):

  samples    For each fixed sample below: `NAME ENDIAN DATA_HEX KEY_HEX KEYHASH_HEX`,
             ENDIAN being `le` or `be`. The Rust test builds the same values and compares.
  reencode   Reads lines `TYPE_NAME DATA_HEX` on stdin (DATA_HEX: a full encoding with its
             encapsulation header, as Spindle produced it). Cyclone decodes it and encodes
             the decoded value again in the same byte order; prints
             `ok DATA_HEX KEY_HEX KEYHASH_HEX` or `err MESSAGE`.

KEY_HEX is the big-endian XCDR1 key serialization (cyclone `serialize_key`, key members in
definition order); KEYHASH_HEX is the RTPS key hash derived from it with cyclone's own key
size analysis (zero-padded when the key can never exceed 16 bytes, else MD5).
"""

import sys
from dataclasses import dataclass
from typing import Optional
from hashlib import md5

import cyclonedds.idl.annotations as annotate
import cyclonedds.idl.types as t
from cyclonedds.idl import IdlEnum, IdlStruct, IdlUnion
from cyclonedds.idl._support import Endianness

# ---- built-in types ---------------------------------------------------------------------


@dataclass
@annotate.final
class KeyedString(IdlStruct, typename="DDS::KeyedString"):
    key: str
    annotate.key("key")
    value: str


@dataclass
@annotate.final
class Sequence(IdlStruct, typename="Spindle::Sequence"):
    payload: t.sequence[t.uint8]


# ---- spindle_topics::builtin::examples --------------------------------------------------


class Color(IdlEnum, typename="Example::Color"):
    RED = 0
    GREEN = 1
    BLUE = 7


class Reading(IdlUnion, discriminator=t.int16, typename="Example::Reading"):
    count: t.case[1, t.int32]
    level: t.case[[2, 3], t.float64]
    note: t.case[4, t.bounded_str[8]]
    raw: t.default[t.uint8]


@dataclass
@annotate.final
class Point(IdlStruct, typename="Example::Point"):
    x: t.int16
    y: t.int64


@dataclass
@annotate.final
class Sample(IdlStruct, typename="Example::Sample"):
    id: t.uint32
    annotate.key("id")
    tag: t.char
    annotate.key("tag")
    name: t.bounded_str[8]
    color: Color
    origin: Point
    coords: t.array[t.float64, 3]
    path: t.sequence[Point, 4]
    reading: Reading
    ok: bool


@dataclass
@annotate.final
class Extras(IdlStruct, typename="Example::Extras"):
    head: t.uint8
    a: Optional[t.int32]
    b: Optional[t.bounded_str[4]]
    c: Optional[t.float64]
    tail: t.uint8


# ---- Avionics (topics/idl/avionics.idl) -------------------------------------------------

CALLSIGN_MAX = 8
FIX_NAME_MAX = 5
AIRPORT_CODE_MAX = 4
WAYPOINTS_MAX = 32
SUBSYSTEM_NAME_MAX = 16
DETAIL_MAX = 4 * SUBSYSTEM_NAME_MAX
AXES = 3

AircraftId = t.typedef["Avionics::AircraftId", t.uint32]
TrackId = t.typedef["Avionics::TrackId", t.uint32]
TimestampNs = t.typedef["Avionics::TimestampNs", t.uint64]
Degrees = t.typedef["Avionics::Degrees", t.float64]
Meters = t.typedef["Avionics::Meters", t.float32]
Callsign = t.typedef["Avionics::Callsign", t.bounded_str[CALLSIGN_MAX]]
Vector3 = t.typedef["Avionics::Vector3", t.array[t.float32, AXES]]


class AltitudeReference(IdlEnum, typename="Avionics::AltitudeReference"):
    BAROMETRIC = 0
    GEOMETRIC = 1
    RADIO = 2


class FlightPhase(IdlEnum, typename="Avionics::FlightPhase"):
    PREFLIGHT = 0
    TAXI = 1
    TAKEOFF = 2
    CLIMB = 3
    CRUISE = 4
    DESCENT = 5
    APPROACH = 6
    LANDING = 7


class WaypointKind(IdlEnum, typename="Avionics::WaypointKind"):
    FIX = 0
    VOR = 1
    NDB = 2
    AIRPORT = 3
    USER_DEFINED = 4


class ConstraintKind(IdlEnum, typename="Avionics::ConstraintKind"):
    NO_CONSTRAINT = 0
    ALTITUDE = 1
    SPEED = 2
    TIME_OF_ARRIVAL = 3


class TrackSource(IdlEnum, typename="Avionics::TrackSource"):
    PRIMARY_RADAR = 0
    SECONDARY_RADAR = 1
    ADSB = 2
    FUSED = 3


class HealthStatus(IdlEnum, typename="Avionics::HealthStatus"):
    NOMINAL = 0
    DEGRADED = 1
    FAILED = 2
    OFFLINE = 3


class Constraint(IdlUnion, discriminator=ConstraintKind, typename="Avionics::Constraint"):
    altitude_m: t.case[ConstraintKind.ALTITUDE, Meters]
    speed_mps: t.case[ConstraintKind.SPEED, t.float32]
    eta_ns: t.case[ConstraintKind.TIME_OF_ARRIVAL, TimestampNs]


class TrackIdentity(IdlUnion, discriminator=t.int16, typename="Avionics::TrackIdentity"):
    icao_address: t.case[1, AircraftId]
    callsign: t.case[[2, 3], Callsign]
    mode_a_code: t.default[t.uint16]


@dataclass
@annotate.final
class GeoPoint(IdlStruct, typename="Avionics::GeoPoint"):
    latitude_deg: Degrees
    longitude_deg: Degrees
    altitude_m: Meters


@dataclass
@annotate.final
class Waypoint(IdlStruct, typename="Avionics::Waypoint"):
    name: t.bounded_str[FIX_NAME_MAX]
    kind: WaypointKind
    position: GeoPoint
    constraint: Constraint


Route = t.typedef["Avionics::Route", t.sequence[Waypoint, WAYPOINTS_MAX]]


@dataclass
@annotate.final
class AirData(IdlStruct, typename="Avionics::AirData"):
    aircraft_id: AircraftId
    annotate.key("aircraft_id")
    timestamp_ns: TimestampNs
    indicated_airspeed_mps: t.float32
    true_airspeed_mps: t.float32
    mach: t.float32
    pressure_altitude_m: Meters
    vertical_speed_mps: t.float32
    static_air_temperature_k: t.float32
    altitude_reference: AltitudeReference


@dataclass
@annotate.final
class Attitude(IdlStruct, typename="Avionics::Attitude"):
    aircraft_id: AircraftId
    annotate.key("aircraft_id")
    timestamp_ns: TimestampNs
    roll_rad: t.float64
    pitch_rad: t.float64
    heading_rad: t.float64
    body_rates_radps: Vector3


@dataclass
@annotate.final
class NavigationPosition(IdlStruct, typename="Avionics::NavigationPosition"):
    aircraft_id: AircraftId
    annotate.key("aircraft_id")
    timestamp_ns: TimestampNs
    position: GeoPoint
    velocity_ned_mps: t.array[t.float32, AXES]
    horizontal_accuracy_m: t.float32
    gnss_valid: bool
    phase: FlightPhase


@dataclass
@annotate.final
class FlightPlan(IdlStruct, typename="Avionics::FlightPlan"):
    aircraft_id: AircraftId
    annotate.key("aircraft_id")
    callsign: Callsign
    origin: t.bounded_str[AIRPORT_CODE_MAX]
    destination: t.bounded_str[AIRPORT_CODE_MAX]
    revision: t.uint16
    route: Route


@dataclass
@annotate.final
class TrackReport(IdlStruct, typename="Avionics::TrackReport"):
    sensor_id: t.uint16
    annotate.key("sensor_id")
    track_id: TrackId
    annotate.key("track_id")
    timestamp_ns: TimestampNs
    source: TrackSource
    identity: TrackIdentity
    position: GeoPoint
    velocity_ned_mps: Vector3
    position_covariance_m2: t.array[t.array[t.float32, AXES], AXES]
    quality: t.uint8
    clock_offset_ns: t.int64


@dataclass
@annotate.final
class HealthHeartbeat(IdlStruct, typename="Avionics::HealthHeartbeat"):
    aircraft_id: AircraftId
    annotate.key("aircraft_id")
    subsystem: t.bounded_str[SUBSYSTEM_NAME_MAX]
    annotate.key("subsystem")
    sequence_number: t.uint32
    status: HealthStatus
    severity_code: t.char
    temperature_c: t.int16
    detail: t.bounded_str[DETAIL_MAX]
    fault_codes: t.sequence[t.uint32]


@dataclass
@annotate.final
class TerrainTile(IdlStruct, typename="Avionics::TerrainTile"):
    tile_id: t.uint32
    annotate.key("tile_id")
    revision: t.uint16
    level: t.uint8
    south_west: GeoPoint
    extent_deg: Degrees
    rows: t.uint16
    columns: t.uint16
    elevation_posts: t.sequence[t.uint8]


TYPES = {
    cls.__idl_typename__: cls
    for cls in [
        KeyedString, Sequence, Sample, Point, Extras,
        AirData, Attitude, NavigationPosition, FlightPlan, TrackReport, HealthHeartbeat,
        TerrainTile, GeoPoint, Waypoint,
    ]
}

# ---- fixed samples (the Rust test builds the same values) -------------------------------

GEO = GeoPoint(latitude_deg=47.4647, longitude_deg=8.5492, altitude_m=432.5)

SAMPLES = [
    ("keyed_string", KeyedString(key="flight/LX38", value="boarding")),
    ("keyed_string_empty", KeyedString(key="", value="")),
    ("sequence", Sequence(payload=list(range(0, 256, 3)))),
    ("sequence_empty", Sequence(payload=[])),
    ("example_sample", Sample(
        id=0x01020304, tag="Q", name="abc", color=Color.BLUE, origin=Point(x=-2, y=5),
        coords=[1.0, -0.5, 2.25], path=[Point(x=1, y=2), Point(x=-3, y=-4)],
        reading=Reading(level=9.5), ok=True)),
    ("example_sample_default_branch", Sample(
        id=7, tag="z", name="", color=Color.GREEN, origin=Point(x=0, y=-1),
        coords=[0.0, 0.0, -0.0], path=[],
        reading=Reading(discriminator=-300, value=200), ok=False)),
    ("example_extras", Extras(head=1, a=5, b="xy", c=2.5, tail=9)),
    ("example_extras_absent", Extras(head=255, a=None, b=None, c=None, tail=0)),
    ("air_data", AirData(
        aircraft_id=0x4B1805, timestamp_ns=1_700_000_000_123_456_789,
        indicated_airspeed_mps=128.5, true_airspeed_mps=231.25, mach=0.78,
        pressure_altitude_m=10668.0, vertical_speed_mps=-2.5,
        static_air_temperature_k=218.15, altitude_reference=AltitudeReference.GEOMETRIC)),
    ("attitude", Attitude(
        aircraft_id=0x4B1805, timestamp_ns=1_700_000_000_200_000_000,
        roll_rad=0.0523, pitch_rad=-0.0174, heading_rad=2.7925,
        body_rates_radps=[0.01, -0.02, 0.125])),
    ("navigation_position", NavigationPosition(
        aircraft_id=0x4B1805, timestamp_ns=1_700_000_000_300_000_000, position=GEO,
        velocity_ned_mps=[120.5, -33.25, 2.0], horizontal_accuracy_m=3.5, gnss_valid=True,
        phase=FlightPhase.APPROACH)),
    ("flight_plan", FlightPlan(
        aircraft_id=0x4B1805, callsign="SWR38", origin="LSZH", destination="KJFK",
        revision=3, route=[
            Waypoint(name="GIPOL", kind=WaypointKind.FIX, position=GEO,
                     constraint=Constraint(altitude_m=3048.0)),
            Waypoint(name="TRA", kind=WaypointKind.VOR,
                     position=GeoPoint(latitude_deg=47.69, longitude_deg=8.43, altitude_m=0.0),
                     constraint=Constraint(eta_ns=1_700_003_600_000_000_000)),
            Waypoint(name="KJFK", kind=WaypointKind.AIRPORT,
                     position=GeoPoint(latitude_deg=40.6413, longitude_deg=-73.7781,
                                       altitude_m=4.0),
                     constraint=Constraint(discriminator=ConstraintKind.NO_CONSTRAINT,
                                           value=None)),
        ])),
    ("track_report", TrackReport(
        sensor_id=12, track_id=90210, timestamp_ns=1_700_000_000_400_000_000,
        source=TrackSource.ADSB, identity=TrackIdentity(discriminator=3, value="DLH4AB"),
        position=GEO, velocity_ned_mps=[200.0, 10.0, -1.0],
        position_covariance_m2=[[25.0, 0.5, 0.0], [0.5, 25.0, 0.0], [0.0, 0.0, 100.0]],
        quality=200, clock_offset_ns=-1234567)),
    ("track_report_mode_a", TrackReport(
        sensor_id=65535, track_id=1, timestamp_ns=0,
        source=TrackSource.PRIMARY_RADAR, identity=TrackIdentity(discriminator=7, value=0o7700),
        position=GEO, velocity_ned_mps=[0.0, 0.0, 0.0],
        position_covariance_m2=[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
        quality=0, clock_offset_ns=9_000_000_000)),
    ("health_heartbeat", HealthHeartbeat(
        aircraft_id=0x4B1805, subsystem="FMS-1", sequence_number=42,
        status=HealthStatus.DEGRADED, severity_code="W", temperature_c=-12,
        detail="GPS 2 lost, using IRS", fault_codes=[0x1001, 0x2002, 0xDEADBEEF])),
    ("terrain_tile", TerrainTile(
        tile_id=0x2F0A11, revision=3, level=9, south_west=GEO, extent_deg=0.25,
        rows=3, columns=5, elevation_posts=[(i * 37) % 256 for i in range(30)])),
]


def key_of(value):
    idl = type(value).__idl__
    if not idl._populated:
        idl.populate()
    key = idl.serialize_key(value, use_version_2=False, endianness=Endianness.Big)
    if idl.v1_key_max_size <= 16:
        key_hash = key + bytes(16 - len(key))
    else:
        key_hash = md5(key).digest()
    return key, key_hash


def encode(value, endianness):
    return value.serialize(endianness=endianness, use_version_2=False)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "samples"
    if mode == "samples":
        for name, value in SAMPLES:
            key, key_hash = key_of(value)
            for tag, endianness in (("le", Endianness.Little), ("be", Endianness.Big)):
                print(name, tag, encode(value, endianness).hex(), key.hex() or "-",
                      key_hash.hex())
    elif mode == "reencode":
        for line in sys.stdin:
            line = line.strip()
            if not line:
                continue
            try:
                type_name, data_hex = line.split(" ")
                data = bytes.fromhex(data_hex)
                value = TYPES[type_name].deserialize(data)
                endianness = Endianness.Little if data[1] & 1 else Endianness.Big
                key, key_hash = key_of(value)
                print("ok", encode(value, endianness).hex(), key.hex() or "-", key_hash.hex())
            except Exception as e:  # report, keep going: the Rust side fails the test
                print("err", repr(e).replace("\n", " "))
            sys.stdout.flush()
    else:
        sys.exit(f"unknown mode {mode!r}; use `samples` or `reencode`")


if __name__ == "__main__":
    main()
