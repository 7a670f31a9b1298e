// A small Markdown renderer for the model's answers: escapes everything first, then adds the few
// constructs answers use (fenced code, inline code, headings, lists, bold, italics, quotes). It never
// lets HTML from the text through, and links stay text: nothing the model writes can run or load.
"use strict";

(function () {
  function escape(text) {
    return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
  }

  function inline(text) {
    const parts = text.split(/(`[^`]+`)/g);
    return parts.map(function (part) {
      if (part.length > 1 && part.startsWith("`") && part.endsWith("`")) {
        return "<code>" + escape(part.slice(1, -1)) + "</code>";
      }
      return escape(part)
        .replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>")
        .replace(/(^|[\s(])\*([^*\s][^*]*)\*/g, "$1<em>$2</em>")
        .replace(/(^|[\s(])_([^_\s][^_]*)_/g, "$1<em>$2</em>");
    }).join("");
  }

  function render(source) {
    const lines = String(source || "").split("\n");
    const out = [];
    let list = null;
    let code = null;
    function closeList() { if (list) { out.push("</" + list + ">"); list = null; } }
    for (const line of lines) {
      if (code !== null) {
        if (/^\s*```/.test(line)) { out.push(escape(code.join("\n")) + "</code></pre>"); code = null; }
        else { code.push(line); }
        continue;
      }
      const fence = line.match(/^\s*```\s*([\w+-]*)/);
      if (fence) { closeList(); out.push('<pre class="code"><code>'); code = []; continue; }
      const heading = line.match(/^(#{1,4})\s+(.*)$/);
      if (heading) { closeList(); const n = heading[1].length + 2; out.push("<h" + n + ">" + inline(heading[2]) + "</h" + n + ">"); continue; }
      const bullet = line.match(/^\s*[-*+]\s+(.*)$/);
      const numbered = line.match(/^\s*\d+[.)]\s+(.*)$/);
      if (bullet || numbered) {
        const kind = bullet ? "ul" : "ol";
        if (list !== kind) { closeList(); out.push("<" + kind + ">"); list = kind; }
        out.push("<li>" + inline((bullet || numbered)[1]) + "</li>");
        continue;
      }
      closeList();
      const quote = line.match(/^>\s?(.*)$/);
      if (quote) { out.push("<blockquote>" + inline(quote[1]) + "</blockquote>"); continue; }
      if (line.trim() === "") { out.push("<br>"); continue; }
      out.push("<p>" + inline(line) + "</p>");
    }
    if (code !== null) { out.push(escape(code.join("\n")) + "</code></pre>"); }
    closeList();
    return out.join("");
  }

  window.kimicodeMarkdown = { render: render, escape: escape };
})();
