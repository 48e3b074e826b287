"""The kinds of figure a stats section declares, and the section that holds them.

A figure is declared once, as a class attribute of a ``Section`` (see
``schema``).  Its kind fixes its type, its zero, how two processes' values
merge and how a value since ``reset_stats()`` is taken from two cumulative
readings; the declaration adds its help text, unit, Prometheus metric (or
the reason it has none) and its line in ``report()``.  Every output is read
from those declarations.  Plain classes with descriptors rather than
dataclasses: the patches import the schema at start-up, where a dataclass
costs ~0.4 ms to define and a plain class ~0.02 ms (``python -X importtime``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, overload

from fastloop.telemetry.histogram import Buckets

if TYPE_CHECKING:
    from typing import Self

S = TypeVar("S", bound="Section")
T = TypeVar("T")

NS = "ns"
BYTES = "bytes"

#: ``label`` left out: the line is the field's name, words apart.
NAMED = "\0named"


class Unexported:
    """A figure Prometheus does not get, and why (the reason is the decision)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


#: Counts that are their histogram's ``_count`` or ``_sum``.
IN_HISTOGRAM = Unexported("exported as a part of its histogram (_count or _sum)")
#: Maxima and percentiles since start-up: histogram_quantile() over the
#: histograms answers the same question per time window.
SINCE_START = Unexported("since start-up: the histograms answer it per time window")


class Declared:
    """Anything declared in a section's body, in order (fields, report headings)."""

    name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name


class Heading(Declared):
    """Starts a block of ``report()``: its title, and when the block is shown.

    With ``patch``, a block whose patch is not active says so: "counted while
    it was" if ``counted`` (a field) is not zero, else "nothing counted".
    ``title`` and ``shown`` may read the section they are declared in.
    """

    def __init__(
        self,
        title: str | Callable[[Any], str],
        *,
        patch: str | None = None,
        counted: str | None = None,
        shown: Callable[[Any], object] | None = None,
    ) -> None:
        self.title = title
        self.patch = patch
        self.counted = counted
        self.shown = shown


class Line(Declared):
    """A line of ``report()`` made from other figures (not a figure itself)."""

    def __init__(
        self, label: str, show: Callable[[Any], str], *, when: str | None = None
    ) -> None:
        self.label = label
        self.show = show
        self.when = when


class Field(Declared, Generic[T]):
    """One figure.  Subclasses are the kinds; ``stored`` ones are counted,
    the others derived from those when read."""

    stored: ClassVar[bool] = True
    #: How two processes' values combine (every kind names its rule).
    merge_rule: ClassVar[str] = ""

    def __init__(
        self,
        help: str,
        *,
        metric: str | Unexported,
        unit: str = "",
        label: str | None = NAMED,
        when: str | None = None,
        show: Callable[[Any], str] | None = None,
    ) -> None:
        self.help = help
        self.metric = metric
        self.unit = unit
        self._label = label
        self.when = when
        self.show = show

    @property
    def label(self) -> str | None:
        """Its ``report()`` line's label; None: no line of its own."""
        return self.name.replace("_", " ") if self._label == NAMED else self._label

    def but(self, **changes: Any) -> Self:
        """A copy with some of the declaration changed (a subclass's own metric)."""
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__)
        for key, value in changes.items():
            setattr(copy, "_label" if key == "label" else key, value)
        return copy

    @overload
    def __get__(self, instance: None, owner: type) -> Self: ...
    @overload
    def __get__(self, instance: Section, owner: type) -> T: ...
    def __get__(self, instance: Section | None, owner: type) -> Self | T:
        if instance is None:
            return self
        value: T = instance._values[self.name]
        return value

    def __set__(self, instance: Section, value: object) -> None:
        raise AttributeError(f"stats are immutable: cannot set {self.name}")

    # What each kind defines:
    def zero(self) -> T:
        raise NotImplementedError

    def merge(self, a: T, b: T) -> T:
        raise NotImplementedError

    def since(self, now: T, base: T) -> T:
        """The value since a baseline, from two cumulative readings."""
        return now

    def to_json(self, value: T) -> Any:
        return value

    def from_json(self, data: Any) -> T:
        value: T = data
        return value

    def text(self, section: Section) -> str:
        """The value as ``report()`` shows it after the label."""
        value = getattr(section, self.name)
        if self.unit == NS:
            return milliseconds(value)
        return f"{value:>14,}"


class Count(Field[int]):
    """Events, bytes or nanoseconds added up: summed across processes.

    ``counted_by``: the live value is not bumped, it is that histogram's
    total.  ``beyond``: the hot path bumps only what goes beyond that other
    count (a callback beyond the first of its batch, bytes offered beyond
    those written), and the figure adds the two.  ``labels``: one series of
    a labelled metric, which the counts declared with the same metric share
    (the time spent at each switch interval).
    """

    merge_rule = "sum"

    def __init__(
        self,
        help: str,
        *,
        counted_by: str | None = None,
        beyond: str | None = None,
        labels: Mapping[str, str] | None = None,
        **declared: Any,
    ) -> None:
        super().__init__(help, **declared)
        self.counted_by = counted_by
        self.beyond = beyond
        self.labels = dict(labels or {})

    def zero(self) -> int:
        return 0

    def merge(self, a: int, b: int) -> int:
        return a + b

    def since(self, now: int, base: int) -> int:
        return now - base


class Maximum(Field[int]):
    """The largest value since start-up or ``reset_stats()``: the maximum of maxima."""

    merge_rule = "maximum"

    def __init__(self, help: str, **declared: Any) -> None:
        declared.setdefault("metric", SINCE_START)
        declared.setdefault("label", None)
        super().__init__(help, **declared)

    def zero(self) -> int:
        return 0

    def merge(self, a: int, b: int) -> int:
        return max(a, b)


class Gauge(Field[float]):
    """A reading now (the interval held, a cost estimate), not a total.

    A value since ``reset_stats()`` is the reading now; processes merge by
    the highest reading, the one a question about a cluster wants (the
    highest cost anywhere, the most compute threads anywhere).
    """

    merge_rule = "maximum"

    def zero(self) -> float:
        return 0

    def merge(self, a: float, b: float) -> float:
        return max(a, b)


class Flag(Field[bool]):
    """Whether something runs now (live: how many run): true if true anywhere."""

    merge_rule = "any"

    def zero(self) -> bool:
        return False

    def merge(self, a: bool, b: bool) -> bool:
        return a or b


class Histogram(Field[Buckets]):
    """A log2 histogram of nanoseconds (``histogram``): merged bucket by bucket.

    ``sum`` and ``maximum`` name the fields that total and bound its samples
    (its Prometheus ``_sum``; its percentiles' ceiling).  Its report line is
    its percentiles, with ``({count} {of})`` when ``of`` names what it counts.
    """

    merge_rule = "buckets"

    def __init__(
        self, help: str, *, sum: str, maximum: str, of: str = "", **declared: Any
    ) -> None:
        declared.setdefault("unit", NS)
        super().__init__(help, **declared)
        self.sum = sum
        self.maximum = maximum
        self.of = of

    def zero(self) -> Buckets:
        return Buckets()

    def merge(self, a: Buckets, b: Buckets) -> Buckets:
        return a + b

    def since(self, now: Buckets, base: Buckets) -> Buckets:
        return now - base

    def to_json(self, value: Buckets) -> list[list[int]]:
        return [list(pair) for pair in value]

    def from_json(self, data: Any) -> Buckets:
        return Buckets.from_pairs(data)

    def text(self, section: Section) -> str:
        buckets: Buckets = getattr(section, self.name)
        top: int = getattr(section, self.maximum)
        marks = ", ".join(
            f"p{round(f * 100)} <= {milliseconds(buckets.percentile(f, top))}"
            for f in (0.50, 0.90, 0.99)
        )
        counted = f" ({buckets.total:,} {self.of})" if self.of else ""
        return f"{marks}, max {milliseconds(top)}{counted}"


class Names(Field[tuple[str, ...]]):
    """Names active in a process; merged, the names active in every process."""

    merge_rule = "intersection"

    def zero(self) -> tuple[str, ...]:
        return ()

    def merge(self, a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(name for name in a if name in b)

    def to_json(self, value: tuple[str, ...]) -> list[str]:
        return list(value)

    def from_json(self, data: Any) -> tuple[str, ...]:
        return tuple(data)


class Part(Field[S]):
    """A section within a section: merged, reset and shown field by field."""

    merge_rule = "by field"

    def __init__(self, section: type[S], help: str = "") -> None:
        super().__init__(
            help or (section.__doc__ or "").strip().splitlines()[0],
            metric=Unexported("its fields are exported one by one"),
            label=None,
        )
        self.section = section

    def zero(self) -> S:
        return self.section()

    def merge(self, a: S, b: S) -> S:
        return a.merge(b)

    def since(self, now: S, base: S) -> S:
        return now.since(base)

    def to_json(self, value: S) -> dict[str, Any]:
        return value.to_dict()

    def from_json(self, data: Any) -> S:
        return self.section.from_dict(data)


class Derived(Field[T]):
    """A figure computed from the others when read: recomputed after a merge,
    never merged itself.  ``in_dict_of`` puts it in that part's ``to_dict()``
    (a figure of the whole snapshot shown beside one section's);  ``line``
    writes its whole ``report()`` line (None: no line)."""

    stored = False
    merge_rule = "recomputed"

    def __init__(
        self,
        compute: Callable[[Any], T],
        help: str,
        *,
        in_dict_of: str = "",
        line: Callable[[Any], str | None] | None = None,
        **declared: Any,
    ) -> None:
        declared.setdefault(
            "metric", Unexported("derived from figures that are exported")
        )
        declared.setdefault("label", None)
        super().__init__(help, **declared)
        self.compute = compute
        self.in_dict_of = in_dict_of
        self.line = line

    def __get__(self, instance: Section | None, owner: type) -> Any:
        if instance is None:
            return self
        return self.compute(instance)


class Percentile(Derived[int]):
    """The upper bound of the histogram bucket that holds this share of its samples."""

    def __init__(self, histogram: str, fraction: float) -> None:
        super().__init__(
            lambda s: getattr(s, histogram).percentile(
                fraction, getattr(s, getattr(type(s), histogram).maximum)
            ),
            f"Upper bound of the {histogram} bucket holding {fraction:.0%} of samples",
            unit=NS,
            metric=SINCE_START,
        )


class Section:
    """A frozen set of figures, declared as class attributes (fields, headings).

    Knows how to merge with another of its kind, how to take the figures
    since a baseline, and its plain JSON-able form and back.
    """

    __slots__ = ("_values",)
    _values: dict[str, Any]
    #: Everything declared in the body, bases first, in order.
    declared: ClassVar[tuple[Declared, ...]] = ()
    #: The figures, stored and derived, in ``to_dict()`` order.
    fields: ClassVar[tuple[Field[Any], ...]] = ()
    stored: ClassVar[tuple[Field[Any], ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        order: dict[str, Declared] = {}
        for klass in reversed(cls.__mro__):
            for name, value in vars(klass).items():
                if isinstance(value, Declared):
                    order[name] = value  # an override keeps its base's place
        cls.declared = tuple(order.values())
        cls.fields = tuple(d for d in cls.declared if isinstance(d, Field))
        cls.stored = tuple(f for f in cls.fields if f.stored)

    def __init__(self, **values: Any) -> None:
        own = {f.name: values.pop(f.name) if f.name in values else f.zero()
               for f in self.stored}  # fmt: skip
        if values:
            raise TypeError(f"{type(self).__name__} has no figure {sorted(values)}")
        object.__setattr__(self, "_values", own)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"stats are immutable: cannot set {name}")

    # Pickled as its figures (``client.run`` sends stats between processes):
    # the default restores slots through __setattr__, which refuses.
    def __getstate__(self) -> dict[str, Any]:
        return self._values

    def __setstate__(self, values: dict[str, Any]) -> None:
        object.__setattr__(self, "_values", values)

    def merge(self, other: Self) -> Self:
        """The figures of both together (two processes', say), kind by kind."""
        return type(self)(
            **{
                f.name: f.merge(self._values[f.name], other._values[f.name])
                for f in self.stored
            }
        )

    def since(self, base: Self) -> Self:
        """These cumulative figures less a baseline reading of the same source."""
        return type(self)(
            **{
                f.name: f.since(self._values[f.name], base._values[f.name])
                for f in self.stored
            }
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data: every figure, derived ones included."""
        data: dict[str, Any] = {}
        for field in self.fields:
            value = field.to_json(getattr(self, field.name))
            if isinstance(field, Derived) and field.in_dict_of:
                data[field.in_dict_of][field.name] = value
            else:
                data[field.name] = value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Back from ``to_dict()`` (derived figures are recomputed, not read)."""
        return cls(
            **{f.name: f.from_json(data[f.name]) for f in cls.stored if f.name in data}
        )

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._values == self._values

    def __hash__(self) -> int:
        return hash((type(self), tuple(self._values.values())))

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"{type(self).__name__}({shown})"


def milliseconds(ns: int) -> str:
    """A duration as the report shows it: ms from 1 ms up, else us."""
    return f"{ns / 1e6:.3f} ms" if ns >= 1_000_000 else f"{ns / 1e3:.1f} us"
