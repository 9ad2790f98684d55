# Run in every kernel the interpreter server starts, before any user code:
# registers a display formatter that describes matplotlib figures as charts
# (type, title, axis labels, data elements), the metadata E2B's SDK exposes
# as result.chart. A figure it cannot read is described as type "unknown";
# the PNG is produced by matplotlib's inline backend either way.


def __sandpit_setup_charts():
    import sys

    from IPython import get_ipython
    from IPython.core.formatters import BaseFormatter
    from traitlets import ObjectName, Unicode

    ip = get_ipython()
    if ip is None:
        return


    def num(v):
        try:
            f = float(v)
        except (TypeError, ValueError):
            return str(v)
        return int(f) if f.is_integer() else f

    def text_of(t):
        return t.get_text() if t is not None else ""

    def axes_chart(ax):
        import matplotlib.collections as mcoll
        import matplotlib.patches as mpatches

        chart = {
            "title": ax.get_title() or None,
            "x_label": ax.get_xlabel() or None,
            "y_label": ax.get_ylabel() or None,
            "elements": [],
        }
        bars = [p for p in ax.patches if isinstance(p, mpatches.Rectangle)]
        lines = list(ax.get_lines())
        scatters = [c for c in ax.collections if isinstance(c, mcoll.PathCollection)]
        if bars and not lines and not scatters:
            chart["type"] = "bar"
            ticks = [text_of(t) for t in ax.get_xticklabels()]
            for container in ax.containers or [bars]:
                label = getattr(container, "get_label", lambda: "")() or ""
                for i, p in enumerate(container):
                    chart["elements"].append({
                        "label": ticks[i] if i < len(ticks) and ticks[i] else str(num(p.get_x() + p.get_width() / 2)),
                        "group": "" if label.startswith("_") else label,
                        "value": num(p.get_height()),
                    })
        elif scatters and not lines:
            chart["type"] = "scatter"
            for c in scatters:
                label = c.get_label()
                chart["elements"].append({
                    "label": "" if label.startswith("_") else label,
                    "points": [[num(x), num(y)] for x, y in c.get_offsets()],
                })
        elif lines:
            chart["type"] = "line"
            for l in lines:
                label = l.get_label()
                chart["elements"].append({
                    "label": "" if label.startswith("_") else label,
                    "points": [[num(x), num(y)] for x, y in zip(l.get_xdata(), l.get_ydata())],
                })
        else:
            chart["type"] = "unknown"
        return chart

    def figure_chart(fig):
        try:
            axes = [a for a in fig.get_axes() if a.has_data()]
            if not axes:
                return {"type": "unknown", "title": None, "elements": []}
            if len(axes) == 1:
                return axes_chart(axes[0])
            title = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else None
            return {"type": "superchart", "title": title, "elements": [axes_chart(a) for a in axes]}
        except Exception as e:  # a figure the reader does not understand
            return {"type": "unknown", "title": None, "elements": [], "error": str(e)}

    # The formatter recognises figures itself rather than through a
    # registered printer: IPython's matplotlib integration removes every
    # formatter's printer for Figure when a backend is activated (the first
    # pyplot import), which would drop one registered here.
    class ChartFormatter(BaseFormatter):
        format_type = Unicode("application/vnd.sandpit.chart+json")
        print_method = ObjectName("_repr_sandpit_chart_")
        _return_type = (dict,)

        def __call__(self, obj):
            mod = sys.modules.get("matplotlib.figure")
            if not self.enabled or mod is None or not isinstance(obj, mod.Figure):
                return None
            return figure_chart(obj)

    f = ChartFormatter(parent=ip.display_formatter)
    ip.display_formatter.formatters[f.format_type] = f


__sandpit_setup_charts()
del __sandpit_setup_charts
