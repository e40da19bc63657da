// The timeline page's script (ctistream.viz.timeline inlines it into each page).
(function () {
  "use strict";
  var svg = document.querySelector("svg.timeline");
  var A = JSON.parse(document.getElementById("timeline-axes").textContent);
  var L = A.left, W = A.width, H = A.height, NS = "http://www.w3.org/2000/svg";
  var base = {x0: A.x.low, x1: A.x.high, y0: A.y.low, y1: A.y.high};
  var view = {x0: base.x0, x1: base.x1, y0: base.y0, y1: base.y1};
  var panels = [].slice.call(svg.querySelectorAll("g.panel")).map(function (g) {
    var top = parseFloat(g.getAttribute("data-top"));
    var plot = g.querySelector("g.plot");
    var items = [];
    [].slice.call(plot.querySelectorAll("circle,line,path")).forEach(function (el) {
      var o = {el: el, cls: el.getAttribute("class") || ""};
      var t = el.getAttribute("transform");
      if (el.tagName === "circle") { o.cx = +el.getAttribute("cx"); o.cy = +el.getAttribute("cy"); }
      else if (el.tagName === "line") {
        o.p = ["x1", "y1", "x2", "y2"].map(function (k) { return +el.getAttribute(k); });
      } else if (t) { var m = /translate\(([-\d.e]+),([-\d.e]+)\)/.exec(t); o.tx = +m[1]; o.ty = +m[2]; }
      else {
        o.d = [];
        el.getAttribute("d").replace(/([ML])([-\d.e]+),([-\d.e]+)/g, function (_, c, a, b) {
          o.d.push([c, +a, +b]);
        });
      }
      items.push(o);
    });
    return {g: g, top: top, ticks: g.querySelector("g.ticks"), items: items};
  });
  function fx(px) {
    var v = base.x0 + (px - L) / W * (base.x1 - base.x0);
    return +(L + (v - view.x0) / (view.x1 - view.x0) * W).toFixed(1);
  }
  function vy(py, top) { return base.y0 + (top + H - py) / H * (base.y1 - base.y0); }
  function fy(py, top) {
    return +(top + H - (vy(py, top) - view.y0) / (view.y1 - view.y0) * H).toFixed(1);
  }
  function nice(lo, hi) {
    var span = hi - lo; if (!(span > 0)) return [lo];
    var raw = span / 6, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 2.5, 5, 10].map(function (m) { return m * mag; })
      .filter(function (s) { return s >= raw; })[0];
    var out = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + 1e-9 * span; v += step) out.push(+v.toPrecision(12));
    return out;
  }
  function label(a, v) { return a.counter ? String(Math.round(v)) : String(+v.toPrecision(6)); }
  function moment(a, v) {
    if (a.inf !== null && v > a.inf - (a.high - a.inf) / 2) return a.infLabel;
    if (a.counter) return String(Math.round(v));
    return new Date((a.origin + v * a.unit) / 1000).toISOString().replace(".000Z", "Z");
  }
  function el(name, attrs, text) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function ticks(p) {
    var g = p.ticks; while (g.firstChild) g.removeChild(g.firstChild);
    function numbered(a, lo, hi) {
      return nice(lo, hi).filter(function (v) { return a.inf === null || v <= a.finite; })
        .map(function (v) { return [v, label(a, v)]; });
    }
    var xs = numbered(A.x, view.x0, view.x1), ys = numbered(A.y, view.y0, view.y1);
    if (A.x.inf !== null) xs.push([A.x.inf, A.x.infLabel]);
    if (A.y.inf !== null) ys.push([A.y.inf, A.y.infLabel]);
    xs.forEach(function (t) {
      if (t[0] < view.x0 || t[0] > view.x1) return;
      var px = (L + (t[0] - view.x0) / (view.x1 - view.x0) * W).toFixed(1);
      g.appendChild(el("line", {x1: px, y1: p.top, x2: px, y2: p.top + H, stroke: "#eee"}));
      g.appendChild(el("text", {x: px, y: p.top + H + 14, "text-anchor": "middle"}, t[1]));
    });
    ys.forEach(function (t) {
      if (t[0] < view.y0 || t[0] > view.y1) return;
      var py = (p.top + H - (t[0] - view.y0) / (view.y1 - view.y0) * H).toFixed(1);
      g.appendChild(el("line", {x1: L, y1: py, x2: L + W, y2: py, stroke: "#eee"}));
      g.appendChild(el("text", {x: L - 6, y: +py + 4, "text-anchor": "end"}, t[1]));
    });
  }
  function place(p) {
    p.items.forEach(function (o) {
      var e = o.el;
      if (o.cx !== undefined) { e.setAttribute("cx", fx(o.cx)); e.setAttribute("cy", fy(o.cy, p.top)); }
      else if (o.p) {
        e.setAttribute("x1", fx(o.p[0])); e.setAttribute("x2", fx(o.p[2]));
        if (o.cls !== "epoch-cut" && o.cls !== "end-of-input") {
          e.setAttribute("y1", fy(o.p[1], p.top)); e.setAttribute("y2", fy(o.p[3], p.top));
        }
      } else if (o.tx !== undefined) {
        var tx = o.cls === "open-end" ? L + W - 5 : fx(o.tx);
        e.setAttribute("transform", "translate(" + tx + "," + fy(o.ty, p.top) + ")");
      } else if (o.d) {
        var n = o.d.length;
        e.setAttribute("d", o.d.map(function (c, i) {
          var x = (o.cls === "open" && i === n - 1) ? L + W : fx(c[1]);
          return c[0] + x + "," + fy(c[2], p.top);
        }).join(" "));
      }
    });
  }
  var pending = false;
  function render() {
    pending = false;
    panels.forEach(function (p) { place(p); ticks(p); });
    ["x0", "x1", "y0", "y1"].forEach(function (k) { svg.setAttribute("data-view-" + k, view[k]); });
    document.getElementById("view-range").textContent = "showing arrival " +
      moment(A.x, view.x0) + " to " + moment(A.x, view.x1) + ", event time " +
      moment(A.y, view.y0) + " to " + moment(A.y, view.y1);
  }
  function update() { if (!pending) { pending = true; requestAnimationFrame(render); } }
  function zoom(f, cx, cy, ax, ay) {
    if (ax) { view.x0 = cx - (cx - view.x0) * f; view.x1 = cx + (view.x1 - cx) * f; }
    if (ay) { view.y0 = cy - (cy - view.y0) * f; view.y1 = cy + (view.y1 - cy) * f; }
    update();
  }
  function pan(dx, dy) {
    var w = view.x1 - view.x0, h = view.y1 - view.y0;
    view.x0 += dx * w; view.x1 += dx * w; view.y0 += dy * h; view.y1 += dy * h;
    update();
  }
  function reset() { view = {x0: base.x0, x1: base.x1, y0: base.y0, y1: base.y1}; update(); }
  function at(evt) {
    var pt = svg.createSVGPoint(); pt.x = evt.clientX; pt.y = evt.clientY;
    var q = pt.matrixTransform(svg.getScreenCTM().inverse());
    if (q.x < L || q.x > L + W) return null;
    for (var i = 0; i < panels.length; i++) {
      var p = panels[i];
      if (q.y >= p.top && q.y <= p.top + H) {
        return {x: view.x0 + (q.x - L) / W * (view.x1 - view.x0),
                y: view.y0 + (p.top + H - q.y) / H * (view.y1 - view.y0), q: q};
      }
    }
    return null;
  }
  svg.addEventListener("wheel", function (evt) {
    var a = at(evt); if (!a) return;
    evt.preventDefault();
    zoom(Math.pow(1.0015, evt.deltaY), a.x, a.y, !evt.altKey, !evt.shiftKey);
  }, {passive: false});
  var drag = null;
  svg.addEventListener("mousedown", function (evt) {
    var a = at(evt); if (!a) return;
    evt.preventDefault();
    drag = {q: a.q, view: {x0: view.x0, x1: view.x1, y0: view.y0, y1: view.y1}};
  });
  window.addEventListener("mousemove", function (evt) {
    if (!drag) return;
    var pt = svg.createSVGPoint(); pt.x = evt.clientX; pt.y = evt.clientY;
    var q = pt.matrixTransform(svg.getScreenCTM().inverse()), v = drag.view;
    var dx = (q.x - drag.q.x) / W * (v.x1 - v.x0), dy = (q.y - drag.q.y) / H * (v.y1 - v.y0);
    view = {x0: v.x0 - dx, x1: v.x1 - dx, y0: v.y0 + dy, y1: v.y1 + dy};
    update();
  });
  window.addEventListener("mouseup", function () { drag = null; });
  svg.addEventListener("dblclick", reset);
  [].slice.call(document.querySelectorAll(".controls button")).forEach(function (b) {
    b.addEventListener("click", function () {
      var act = b.getAttribute("data-act");
      var cx = (view.x0 + view.x1) / 2, cy = (view.y0 + view.y1) / 2;
      if (act === "in") zoom(0.5, cx, cy, true, true);
      else if (act === "out") zoom(2, cx, cy, true, true);
      else if (act === "left") pan(-0.25, 0);
      else if (act === "right") pan(0.25, 0);
      else if (act === "up") pan(0, 0.25);
      else if (act === "down") pan(0, -0.25);
      else reset();
    });
  });
  var filter = document.getElementById("key-filter");
  var keyed = [].slice.call(svg.querySelectorAll("[data-key]"));
  var known = {};
  [].slice.call(document.querySelectorAll("#timeline-keys option")).forEach(function (o) {
    known[o.value] = true;
  });
  filter.addEventListener("input", function () {
    var k = filter.value, shown = 0;
    keyed.forEach(function (e) {
      var key = e.getAttribute("data-key");
      var on = !k || (known[k] ? key === k : key.indexOf(k) >= 0);
      e.style.display = on ? "" : "none";
      if (on) shown++;
    });
    svg.setAttribute("data-key-filter", k);
    document.getElementById("key-count").textContent =
      k ? shown + " of " + keyed.length + " keyed marks shown" : "";
  });
  render();
})();
