// ranktime report: draws the page from the JSON in #report-data. Every name in it (tensors,
// hosts, files, settings) is untrusted: it only ever becomes text (textContent, attribute values
// set one by one), never markup, and nothing here loads anything.
(function () {
  'use strict';
  const data = JSON.parse(document.getElementById('report-data').textContent);
  const root = document.getElementById('report');
  const tooltip = document.getElementById('tooltip');
  const SVG = 'http://www.w3.org/2000/svg';

  // el('td', {class: 'num'}, 'text', child, ...): strings become text nodes.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    set(node, attrs);
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.appendChild(typeof child === 'string' ? document.createTextNode(child) : child);
    }
    return node;
  }
  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    set(node, attrs);
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function set(node, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  }
  function fmt(v, digits) {
    if (v === null || v === undefined) return '\u2013';
    if (typeof v === 'boolean') return v ? 'yes' : 'no';
    if (typeof v === 'number') return digits === undefined ? String(v) : v.toFixed(digits);
    return String(v);
  }
  function ms(v) {
    if (v === null || v === undefined) return '\u2013';
    if (Math.abs(v) >= 1000) return (v / 1000).toFixed(3) + ' s';
    if (Math.abs(v) >= 1) return v.toFixed(3) + ' ms';
    return (v * 1000).toFixed(1) + ' \u00b5s';
  }
  function host(rank) {
    const h = data.run.hostnames[rank];
    return h === undefined ? '' : h;
  }
  function rankLabel(rank) {
    const h = host(rank);
    return 'rank ' + rank + (h ? ' (' + h + ')' : '');
  }
  function section(id, title, ...children) {
    return el('section', {id: id}, el('h2', {}, title), ...children);
  }

  // Hover details: one listener per chart; the hovered element carries data-tip-* indices.
  function hover(container, describe) {
    container.addEventListener('mousemove', (e) => {
      const text = describe(e.target);
      if (!text) { tooltip.hidden = true; return; }
      tooltip.textContent = text;
      tooltip.hidden = false;
      const x = Math.min(e.clientX + 14, window.innerWidth - tooltip.offsetWidth - 8);
      const y = Math.min(e.clientY + 14, window.innerHeight - tooltip.offsetHeight - 8);
      tooltip.style.left = x + 'px';
      tooltip.style.top = y + 'px';
    });
    container.addEventListener('mouseleave', () => { tooltip.hidden = true; });
  }

  // White to orange to red.
  function heatColour(t) {
    t = Math.max(0, Math.min(1, t));
    const stops = [[247, 247, 247], [253, 174, 97], [215, 25, 28]];
    const s = t < 0.5 ? 0 : 1;
    const f = t < 0.5 ? t / 0.5 : (t - 0.5) / 0.5;
    const c = stops[s].map((a, i) => Math.round(a + (stops[s + 1][i] - a) * f));
    return 'rgb(' + c.join(',') + ')';
  }

  // A summary table: {name, title, columns: [{name, precision}], rows: [[...]], empty}.
  function table(t, options) {
    options = options || {};
    if (!t) return el('p', {class: 'muted'}, 'not in this report');
    const wrap = el('div', {class: 'scroll'});
    if (t.title && !options.noTitle) wrap.appendChild(el('p', {class: 'note'}, t.title));
    if (!t.rows.length) {
      wrap.appendChild(el('p', {class: 'muted'}, t.empty || '(none)'));
      return wrap;
    }
    const head = el('tr', {});
    const numeric = t.columns.map((c, i) => t.rows.some((r) => typeof r[i] === 'number'));
    t.columns.forEach((c, i) => head.appendChild(el('th', {class: numeric[i] ? 'num' : ''},
                                                    c.name)));
    const body = el('tbody', {});
    const limit = options.limit || t.rows.length;
    t.rows.slice(0, limit).forEach((row, r) => {
      const tr = el('tr', {class: t.sub && t.sub[r] ? 'sub' : ''});
      row.forEach((v, i) => {
        const text = fmt(v, typeof v === 'number' ? t.columns[i].precision : undefined);
        const td = el('td', {class: numeric[i] ? 'num' : 'name'}, text);
        if (!numeric[i]) td.setAttribute('title', text);
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
    wrap.appendChild(el('table', {id: 'table-' + t.name}, el('thead', {}, head), body));
    if (t.rows.length > limit) {
      wrap.appendChild(el('p', {class: 'muted'}, (t.rows.length - limit) +
                                                 ' more rows: ranktime summary --table ' + t.name));
    }
    return wrap;
  }

  function fact(k, v) {
    return el('div', {class: 'fact'}, el('div', {class: 'k'}, k), el('div', {class: 'v'}, v));
  }

  function header() {
    const run = data.run;
    const hosts = {};
    for (const h of run.hostnames) hosts[h] = (hosts[h] || 0) + 1;
    const hostText = Object.keys(hosts).sort()
        .map((h) => h + (hosts[h] > 1 ? ' \u00d7' + hosts[h] : '')).join(', ');
    const facts = el('div', {class: 'facts'},
        fact('ranks', fmt(run.ranks || null)),
        fact('hosts', hostText || '\u2013'),
        fact('steps', run.steps + (run.steps ? ' (' + run.steps_from + ')' : '')),
        fact('wall time', ms(run.wall_ms)),
        fact('waiting', fmt(run.waited_pct, 1) + '% of rank time'),
        fact('events', String(run.events)),
        fact('negotiations', String(run.negotiations)),
        fact('file closed cleanly', fmt(run.closed_cleanly)),
        fact('events dropped', String(run.events_dropped)));
    if (run.start_time) facts.appendChild(fact('started (UTC)', run.start_time));
    const files = el('p', {class: 'files'}, data.files.join('\n'));
    files.setAttribute('title', 'trace files');
    const out = [el('h1', {}, 'ranktime report'), files, facts];
    if (run.truncated) {
      out.push(el('p', {class: 'note'}, 'The trace was cut short (' + run.error +
                                        '): figures cover the complete events before the cut.'));
    }
    return out;
  }

  // What each rank's lateness cost (the what-if replay), and each step measured against replayed.
  function cost() {
    const out = section('cost', 'What lateness cost');
    out.appendChild(el('p', {class: 'headline', id: 'cost-line'}, data.cost_line));
    out.appendChild(el('p', {class: 'note', id: 'replay-line'}, data.replay_line));
    out.appendChild(table(data.cost));
    const t = data.cost_steps;
    const col = (name) => t.columns.findIndex((c) => c.name === name);
    const stepCol = col('step'), measuredCol = col('measured_ms'), replayedCol = col('replayed_ms'),
        savingCol = col('saving_ms'), rankCol = col('costliest_rank');
    const rows = t.rows;
    if (rows.length) {
      // Bars: measured; a tick: replayed; the lighter part of a bar: what the costliest rank cost.
      let max = 0;
      for (const r of rows) max = Math.max(max, r[measuredCol], r[replayedCol]);
      const height = 160, barW = Math.max(2, Math.min(24, Math.floor(720 / rows.length))),
          left = 8;
      const chart = svg('svg', {width: left + rows.length * barW + 8, height: height + 24,
                                id: 'cost-chart'});
      const y = (v) => height - (max > 0 ? v / max * height : 0);
      rows.forEach((r, i) => {
        const x = left + i * barW;
        const measured = r[measuredCol], saving = r[savingCol] || 0;
        chart.appendChild(svg('rect', {class: 'bar', x: x, y: y(measured), width: barW - 1,
                                       height: height - y(measured), fill: '#2e6fb7',
                                       'data-i': i}));
        if (saving > 0) {
          chart.appendChild(svg('rect', {class: 'bar', x: x, y: y(measured),
                                         width: barW - 1, height: height - y(saving),
                                         fill: '#f1a340', 'data-i': i}));
        }
        chart.appendChild(svg('rect', {class: 'bar replayed', x: x, y: y(r[replayedCol]) - 1,
                                       width: barW - 1, height: 2, fill: '#222', 'data-i': i}));
      });
      chart.appendChild(svg('text', {x: left, y: height + 16, class: 'axis'},
                            'steps ' + rows[0][stepCol] + '–' + rows[rows.length - 1][stepCol] +
                            ', tallest ' + ms(max)));
      hover(chart, (target) => {
        if (!target.classList || !target.classList.contains('bar')) return null;
        const r = rows[Number(target.getAttribute('data-i'))];
        return 'step ' + r[stepCol] + '\nmeasured ' + ms(r[measuredCol]) + '\nreplayed ' +
               ms(r[replayedCol]) + (r[rankCol] >= 0 ? '\n' + rankLabel(r[rankCol]) + ' cost ' +
               ms(r[savingCol]) : '');
      });
      out.appendChild(el('div', {class: 'legend'}, 'Each step: the bar is its measured time, ' +
                         'the dark tick its unchanged replay, the orange top what the costliest ' +
                         'rank\'s lateness cost in it.'));
      out.appendChild(el('div', {class: 'scroll'}, chart));
    }
    out.appendChild(el('details', {}, el('summary', {}, rows.length + ' steps replayed'),
                       table(t)));
    return out;
  }

  function verdict() {
    const box = el('div', {class: 'verdict', id: 'verdict'});
    const headline = data.slowest_rank === null
        ? 'No rank kept the others waiting.'
        : 'Slowest rank: ' + rankLabel(data.slowest_rank) + '.';
    box.appendChild(el('p', {class: 'headline', id: 'slowest-rank'}, headline));
    box.appendChild(el('p', {id: 'summary-line'}, data.summary_line));
    box.appendChild(el('p', {id: 'waiting-line'}, data.waiting_line));
    if (data.causes.line) box.appendChild(el('p', {id: 'cause-line'}, data.causes.line));
    return box;
  }

  // The late ranks by region: each cell a region's mean excess over the other ranks' median,
  // per step the rank was late in; the deeper the red, the more of its lateness.
  function causes() {
    const c = data.causes;
    const out = section('causes', 'Why: the late ranks\' regions');
    if (!c.has_regions) {
      out.appendChild(el('p', {class: 'muted'}, 'No regions in the trace (ranktime.region, ' +
                                                'ranktime.torch.instrument).'));
      return out;
    }
    out.appendChild(el('p', {class: 'note'},
        'Per late rank and region: how much longer the region took than the other ranks\' ' +
        'median for it, per step the rank was late in (own time: less time blocked in ranktime ' +
        'and in nested regions). A rank is late in a step when its last readiness is 1 ms or ' +
        'more behind the other ranks\' median. Under a cell, from a merged profiler trace: the ' +
        'operators inside the region that took longer than on the other ranks (own time).'));
    if (!c.ranks.length) {
      out.appendChild(el('p', {class: 'muted'}, 'No rank was late in a step with regions.'));
      return out;
    }
    const head = el('tr', {}, el('th', {}, 'rank'), el('th', {class: 'num'}, 'late steps'),
                    el('th', {class: 'num'}, 'lateness'));
    for (const region of c.regions) head.appendChild(el('th', {class: 'num'}, region));
    const body = el('tbody', {});
    c.ranks.forEach((rank, i) => {
      const lateness = c.lateness_ms[i];
      const tr = el('tr', {}, el('td', {}, rankLabel(rank)),
                    el('td', {class: 'num'}, c.steps[i][0] + ' of ' + c.steps[i][1]),
                    el('td', {class: 'num'}, ms(lateness)));
      c.excess_ms[i].forEach((v, j) => {
        const td = el('td', {class: 'num'}, ms(v));
        if (v !== null && v > 0 && lateness > 0) {
          td.style.backgroundColor = heatColour(0.5 + 0.5 * Math.min(1, v / lateness));
        }
        // The profiler's operators inside the region (a merged trace): names are text nodes.
        const ops = c.operators[i][j];
        for (const op of ops) {
          td.appendChild(el('div', {class: 'operator'}, op.name + ' +' + ms(op.excess_ms)));
        }
        td.setAttribute('title', rankLabel(rank) + ': "' + c.regions[j] + '" ' + ms(v) +
                                 ' longer than the other ranks\' median, per late step' +
                                 ops.map((op) => '; ' + op.name + ' ' + ms(op.excess_ms) +
                                                 ' longer').join(''));
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
    out.appendChild(el('div', {class: 'scroll'},
                       el('table', {id: 'table-cause-matrix'}, el('thead', {}, head), body)));
    out.appendChild(table(c.table));
    return out;
  }

  function heatmap() {
    const h = data.heat;
    const out = section('heatmap', 'Lateness by rank and step');
    if (!h.columns.length) {
      out.appendChild(el('p', {class: 'muted'}, 'No steps with negotiations in this trace.'));
      return out;
    }
    out.appendChild(el('p', {class: 'note'},
        'Each cell is one rank in one step (' + h.steps_from + '): its last tensor\'s readiness ' +
        'behind the first rank\'s. Hover for the step start lag and the waits.' +
        (h.group > 1 ? ' Each column groups ' + h.group + ' steps (the largest lag, the summed ' +
                       'waits).' : '')));
    const ranks = h.ranks.length, cols = h.columns.length;
    const cw = Math.max(2, Math.min(28, Math.floor(1000 / cols)));
    const ch = ranks <= 16 ? 20 : Math.max(4, Math.floor(480 / ranks));
    const left = 70, top = 22;
    const width = left + cols * cw + 4, height = top + ranks * ch + 4;
    let max = 0;
    for (const row of h.ready_lag_ms) for (const v of row) if (v !== null && v > max) max = v;
    const chart = svg('svg', {width: width, height: height, role: 'img',
                              'aria-label': 'lateness heat map, ' + ranks + ' ranks by ' + cols +
                                  ' steps'});
    const labelEvery = Math.max(1, Math.ceil(40 / cw));
    h.columns.forEach((c, j) => {
      if (j % labelEvery === 0) {
        chart.appendChild(svg('text', {x: left + j * cw, y: 14, class: 'axis'}, c.label));
      }
    });
    const rankEvery = ch >= 12 ? 1 : Math.ceil(12 / ch);
    const cells = svg('g', {id: 'heatmap-cells'});
    h.ranks.forEach((rank, i) => {
      if (i % rankEvery === 0) {
        chart.appendChild(svg('text', {x: 4, y: top + i * ch + Math.min(ch, 14) - 3,
                                       class: 'axis'}, 'rank ' + rank));
      }
      for (let j = 0; j < cols; j++) {
        const v = h.ready_lag_ms[i][j];
        cells.appendChild(svg('rect', {
          class: 'cell', x: left + j * cw, y: top + i * ch, width: Math.max(1, cw - 1),
          height: Math.max(1, ch - 1), fill: v === null ? '#e4e7eb' : heatColour(max > 0 ? v / max : 0),
          'data-r': i, 'data-c': j}));
      }
    });
    chart.appendChild(cells);
    hover(chart, (t) => {
      if (!t.classList || !t.classList.contains('cell')) return null;
      const i = Number(t.getAttribute('data-r')), j = Number(t.getAttribute('data-c'));
      const c = h.columns[j];
      return rankLabel(h.ranks[i]) + ', step ' + c.label +
             '\nlast tensor ready ' + ms(h.ready_lag_ms[i][j]) + ' after the first rank' +
             '\nstep start ' + (h.start_lag_ms[i][j] === null ? 'not marked'
                                : ms(h.start_lag_ms[i][j]) + ' after the first rank') +
             '\nothers waited for it ' + ms(h.others_waited_ms[i][j]) +
             '\nit waited for others ' + ms(h.waited_ms[i][j]);
    });
    out.appendChild(el('div', {class: 'scroll'}, chart));
    const legend = svg('svg', {width: 160, height: 12});
    for (let k = 0; k < 32; k++) {
      legend.appendChild(svg('rect', {x: k * 5, y: 0, width: 5, height: 12,
                                      fill: heatColour(k / 31)}));
    }
    out.appendChild(el('div', {class: 'legend'}, el('span', {}, '0'), legend,
                       el('span', {}, ms(max)), el('span', {}, '(grey: no tensor in the step)')));
    return out;
  }

  function waits() {
    const t = data.lateness;
    const out = section('waits', 'Waits caused and suffered');
    out.appendChild(el('p', {class: 'note'},
        'Wall-clock time: while a rank has a tensor ready that another rank has not, it waits ' +
        'for that rank. Overlapping negotiations count once. Caused: the other ranks\' waits ' +
        'for this rank (at most (ranks \u2212 1) \u00d7 wall). Suffered: this rank\'s waits ' +
        'for any other (at most the wall time).'));
    const col = (name) => t.columns.findIndex((c) => c.name === name);
    const rankCol = col('rank'), causedCol = col('others_waited_ms'), waitedCol = col('waited_ms');
    const rows = t.rows;
    if (rows.length) {
      let max = 0;
      for (const r of rows) max = Math.max(max, r[causedCol], r[waitedCol]);
      const left = 70, barW = 560, rowH = 26;
      const chart = svg('svg', {width: left + barW + 160, height: rows.length * rowH + 8,
                                id: 'waits-chart'});
      rows.forEach((r, i) => {
        const y = 4 + i * rowH;
        chart.appendChild(svg('text', {x: 4, y: y + 15}, 'rank ' + r[rankCol]));
        [[causedCol, '#c0392b', 0], [waitedCol, '#2e6fb7', 11]].forEach(([c, colour, dy]) => {
          if (!(r[c] > 0)) return;
          const w = Math.max(1, r[c] / max * barW);
          chart.appendChild(svg('rect', {class: 'bar', x: left, y: y + dy, width: w, height: 10,
                                         fill: colour, 'data-i': i, 'data-c': c}));
          chart.appendChild(svg('text', {x: left + w + 4, y: y + dy + 9, class: 'axis'},
                                ms(r[c])));
        });
      });
      hover(chart, (target) => {
        if (!target.classList || !target.classList.contains('bar')) return null;
        const r = rows[Number(target.getAttribute('data-i'))];
        return rankLabel(r[rankCol]) + '\nothers waited for it ' + ms(r[causedCol]) +
               '\nit waited for others ' + ms(r[waitedCol]);
      });
      out.appendChild(el('div', {class: 'legend'}, el('span', {class: 'swatch caused'}),
                         'others waited for this rank', el('span', {class: 'swatch waited'}),
                         'this rank waited for others'));
      out.appendChild(el('div', {class: 'scroll'}, chart));
    }
    out.appendChild(table(t));
    return out;
  }

  function phases() {
    const p = data.phases_by_rank;
    const out = section('phases', 'Phases per rank');
    out.appendChild(el('p', {class: 'note'},
        'Share of the wall time during which at least one slice of the phase was open on the ' +
        'rank (a union over its tensors: tensors queued or fused together count once). ' +
        'Sub-phases nest inside their operation; different operations may overlap.'));
    if (!p.rows.length) {
      out.appendChild(el('p', {class: 'muted'}, 'No operation slices.'));
      return out;
    }
    const head = el('tr', {}, el('th', {}, 'op'), el('th', {}, 'phase'));
    for (const r of p.ranks) head.appendChild(el('th', {class: 'num'}, 'rank ' + r));
    const body = el('tbody', {});
    p.rows.forEach((row) => {
      const tr = el('tr', {class: row.sub ? 'sub' : ''}, el('td', {}, row.op),
                    el('td', {}, row.phase));
      row.share_pct.forEach((v, i) => {
        const td = el('td', {class: 'num'}, fmt(v, 1) + '%');
        if (v !== null) td.style.backgroundColor = 'rgba(46,111,183,' + (v / 100 * 0.6) + ')';
        td.setAttribute('title', rankLabel(p.ranks[i]) + ': ' + row.phase + ' busy ' +
                                 ms(row.busy_ms[i]));
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
    out.appendChild(el('div', {class: 'scroll'},
                       el('table', {id: 'table-phases'}, el('thead', {}, head), body)));
    return out;
  }

  function clocks() {
    const run = data.run;
    const wrap = el('details', {}, el('summary', {}, 'Clock offsets and settings'));
    wrap.appendChild(el('p', {class: 'note'},
        'Rank r\'s clock minus rank 0\'s, as estimated at the start (and at the end of a cleanly ' +
        'closed run), with its uncertainty (half the best round trip). Every time in the trace ' +
        'is on rank 0\'s clock.'));
    const head = el('tr', {}, el('th', {}, 'rank'), el('th', {}, 'host'),
                    el('th', {class: 'num'}, 'offset_us'), el('th', {class: 'num'}, '\u00b1 us'),
                    el('th', {class: 'num'}, 'final offset_us'), el('th', {class: 'num'}, '\u00b1 us'));
    const body = el('tbody', {});
    const n = Math.max(run.ranks, run.clock_offsets_us.length);
    for (let r = 0; r < n; r++) {
      body.appendChild(el('tr', {}, el('td', {class: 'num'}, String(r)), el('td', {}, host(r)),
          el('td', {class: 'num'}, fmt(run.clock_offsets_us[r], 1)),
          el('td', {class: 'num'}, fmt(run.clock_uncertainty_us[r], 1)),
          el('td', {class: 'num'}, fmt(run.final_clock_offsets_us[r], 1)),
          el('td', {class: 'num'}, fmt(run.final_clock_uncertainty_us[r], 1))));
    }
    wrap.appendChild(el('div', {class: 'scroll'},
                        el('table', {id: 'table-clocks'}, el('thead', {}, head), body)));
    if (run.config.length) {
      const rows = el('tbody', {});
      for (const [k, v] of run.config) rows.appendChild(el('tr', {}, el('td', {}, k), el('td', {}, v)));
      wrap.appendChild(el('table', {id: 'table-config'},
                          el('thead', {}, el('tr', {}, el('th', {}, 'setting'), el('th', {}, 'value'))),
                          rows));
    }
    return wrap;
  }

  function openTrace() {
    const out = section('open-trace', 'Open the trace itself');
    const list = el('ol', {});
    list.appendChild(el('li', {}, 'Go to ', el('span', {class: 'code'}, 'https://ui.perfetto.dev'),
                        ' (or ', el('span', {class: 'code'}, 'chrome://tracing'),
                        ' in Chrome) and choose "Open trace file".'));
    list.appendChild(el('li', {}, 'Pick ', el('span', {class: 'code'}, data.files.join(', ')),
                        data.files.length > 1 ? ' (one file at a time: each is a complete trace)'
                                              : '', '. The file stays on your machine.'));
    list.appendChild(el('li', {}, 'Each tensor is a process: its negotiate lane has one tick per ' +
                        'rank at the moment that rank was ready; the last tick is the rank ' +
                        'everyone waited for. Its rank lanes show where the time went after.'));
    out.appendChild(list);
    out.appendChild(el('p', {class: 'note'}, 'This page loads nothing from the network and ' +
                        'holds aggregates only; for a time window or fewer ranks, run ' +
                        'ranktime summary with --from/--to/--ranks.'));
    return out;
  }

  // An elastic job's attempts (report/attempts.js) come before the last attempt's figures.
  const elastic = data.attempts ? [drawAttempts(data, {el, svg, section, table, hover})] : [];
  const parts = [...header(), ...elastic, cost(), verdict(), causes(), heatmap(), waits(), phases(),
    section('time', 'Where the time went', table(data.time)),
    section('top-tensors', 'Top tensors', el('h3', {}, 'By negotiation wait'),
            table(data.top_wait), el('h3', {}, 'By processing time'), table(data.top_processing)),
    section('fusion-bandwidth', 'Fusion and bandwidth', table(data.fusion), table(data.bandwidth),
            table(data.cycles)),
    section('steps', 'Steps', el('details', {}, el('summary', {}, data.steps.rows.length +
                                                            ' steps'), table(data.steps))),
    clocks(), openTrace()];
  for (const p of parts) root.appendChild(p);
  document.title = 'ranktime report: ' + data.files.map((f) => f.split('/').pop()).join(', ');
  document.body.setAttribute('data-ready', '1');
})();
